"""The offline reader: pick the one to three evidence units that answer the question.

Each unit (a sentence, a list item, or a table row with its header; see units.py) is
scored by
- coverage: the share of the question's term weight it holds, its section title and
  document name helping (under an FAQ heading that asks the question, in full);
- the answer type the question expects (a number for 多少/how many, a time, a threshold,
  a list, a name, a version): a unit holding that kind of fact is worth more, and a name
  glued to its version ("python3") also counts as the name;
- novelty: a unit that only repeats the question's words answers nothing;
- the embedder's similarity to the question, and the rank of its evidence (top first);
- with an encoder (a multilingual sentence encoder, injected) and no unit in the question's
  language that covers it, the encoder's similarity to the question: added to the score of
  every unit, and to the coverage of a unit not in the question's language, whose words the
  question cannot share (an English question, a Chinese sentence);
- commands and code lines are skipped unless the question asks for them.
When no unit covers enough of the question, the reader says nothing answers, rather than
quoting the closest noise. lead_in names the lead unit's section when its title says what the
quoted units leave unsaid ("SQuAD format" over "This suits Chinese extractive QA sets").
A lead-in ("输出不同字段:") is quoted with the first items of what it introduces, and an item
with its lead-in; headings and lines of drawings are never quoted (see units.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .units import Unit, has_cjk, is_heading_of, row_cells, split_units, strip_markdown, strip_numbering, text_language

Tokenize = Callable[[str], list[str]]
Similarity = Callable[[str, str], float]
Expand = Callable[[str], list[str]]

# "who" as it opens a question or one of its parts; "a user who uploads" asks no person.
ASKS_WHO = r"(?:^|[,;:，；]\s*|\b(?:and|but)\s+)who(?:m|se)?\b"
_TYPE_PATTERNS: dict[str, re.Pattern[str]] = {
    # "when"/"什么时候" often asks for a condition ("when does the breaker open?"), not a time
    "time": re.compile(r"多久|多长时间|耗时|延迟|超时|\bhow long\b|\blatency\b|\btimeout\b|\bttl\b|\bp50\b|\bp95\b", re.I),
    "threshold": re.compile(r"阈值|门槛|门控|条件|上限|下限|至少|最多|\bthreshold|\bcut-?off\b|\blimit\b|\bminimum\b|\bmaximum\b|\btrigger", re.I),
    "number": re.compile(
        r"多少|几[个条种次轮层步项类路级]?|多大|多长|比例|权重|常数|数量|\bhow (?:many|much|big|large|long)\b|\bwhat (?:number|size|value|percentage)\b"
        r"|温度|\btemperature\b"
        r"|\bconstant\b|\bweight(?:s|ed|ing)?\b|加权|\bratio\b|\bsize\b|\bbudget\b|\bdimensions?\b|\bport\b|\bpercent", re.I),
    "list": re.compile(r"哪些|哪几|哪[两二三四五六七八九十]|有什么|有几种|列出|步骤|\bwhich \w+s\b|\bwhich \w+[ -]\w+(?<![su])s (?:do|does|did|are|were|can|could|may|might|must|should|will|would|have|has)\b|\bwhat (?!(?:does|is|was|has|this)\b)\w{2,}s\b|\bwhat are\b|\blist\b|\bsteps\b|\bkinds?\b|\btypes\b", re.I),
    "name": re.compile(r"哪个|谁|名字|名称|叫什么|什么模型|\bwhich\b|\bwho\b|\bname\b|\bwhat model\b", re.I),
    "how": re.compile(r"如何|怎么|怎样|哪些|\bhow (?:do|does|is|are|to|can)\b|\bwhat are\b", re.I),
    "identifier": re.compile(r"环境变量|变量名|配置项|\benvironment variables?\b|\benv vars?\b|\bsettings? name\b", re.I),
    "version": re.compile(r"版本|\bversions?\b|\brelease\b", re.I),
    "port": re.compile(r"端口|\bports?\b", re.I),
    # Asks for a person, a role or a team: "Who wrote …?", "由哪个团队负责…？"
    "person": re.compile(rf"谁|哪位|哪个(?:人|团队|部门|小组|同事)|{ASKS_WHO}", re.I),
    # Asks for a date: "When was it created?", "哪天发布的？". Not "When does shortcut C
    # trigger?", which asks for a condition.
    # Or when an event happened: "郭麐在哪一年去世？", "是从什么时候开始的？", "什么时间出版的？".
    "date": re.compile(
        r"\bwhen (?:was|were|did)\b|\b(?:what|which) (?:date|day|year)\b|日期|哪一?天|哪一?年|何年"
        r"|(?:什么时候|什么时间|何时)(?:创建|发布|编写|上线|更新|去世|逝世|出生|成立|建成|建立|创立|创办|开通|开业|开始"
        r"|出版|发行|举行|登基|即位|完成|结束|开幕|竣工|通车|首播|播出)",
        re.I),
    # Asks for written works: "邵伯温曾写过什么著作？", "曹文埴写过什么作品？"
    "works": re.compile(r"著作|作品|著述|著有|写过什么|写了什么|\bwhat (?:books|novels|poems) did\b", re.I),
    # Asks for a colour: "青斑阿南鱼的雄鱼是什么颜色的？"
    "colour": re.compile(r"颜色|体色|什么色|\bcolou?rs?\b", re.I),
    # Asks how an animal lives: "白尾雀鲷的生活习性是什么样的？", "栖息环境"
    "habits": re.compile(r"习性|栖息|生活环境|\bhabits?\b|\bhabitats?\b", re.I),
    # Asks where a living thing is classed: "松鸦属于什么科目？", "唐鱼是什么科的其中一种？"
    "taxon": re.compile(r"(?:什么|哪个?|哪一)科(?![技学研])|什么(?:属|目|纲|门)(?:的|动物|植物)|\b(?:which|what) (?:family|genus)\b", re.I),
    # Asks for a posthumous name: "魏裔介的谥号是什么？"
    "posthumous": re.compile(r"谥|庙号|\bposthumous name\b", re.I),
    # Asks for another name of the thing: "松鸦又可以叫什么？", "扬子克拉通又叫什么？", "What else is it called?"
    "alias": re.compile(
        r"[又还也亦](?:可以|可|被)?(?:叫|称|名)|别名|别称|俗称|其[他它]名|另一?个?名|"
        r"\b(?:also|otherwise) (?:known as|called|named)\b|\bwhat else (?:is|are|was|were)\b[^?]{0,60}?\bcalled\b|\bother names?\b|\bnicknames?\b",
        re.I),
}
# Words that name the kind of answer, not its subject: "Which environment variable sets the
# upload limit?" is about the upload limit; a sentence about environment variables in
# general shares the words and misses the point.
_ANSWER_KIND_WORDS = re.compile(r"环境变量|\benvironment variables?\b|\benv vars?\b", re.I)
# Only searched for (does the unit hold one?). A number or a word is tried from its first
# character only, and taken whole: from every digit of a long run of digits it would be read to
# the run's end again.
_FACT_PATTERNS: dict[str, re.Pattern[str]] = {
    "time": re.compile(
        r"(?<!\d)\d++(?:\.\d++)?+\s*+(?:ms|s|min(?:ute)?s?|h|days?|hours?|seconds?)\b"
        r"|(?<![\d一二三四五六七八九十百两])[\d一二三四五六七八九十百两]++\s*+(?:毫秒|秒|分钟|小时|天)"
    ),
    "threshold": re.compile(
        r"[<>≤≥]=?\s*\d|(?<!\d)\d++(?:\.\d++)?+\s*+(?:以上|以下|以内)|至少|不超过|不低于|at (?:least|most)|above|below"
        r"|\b\d+(?:\.\d+)?\b"
    ),
    # a number standing alone ("k = 60", "0.7", "35%"), not digits inside a name (BM25, e5, S7)
    # or written out ("Sixteen nodes", "八个阶段"; not "one" or 一个, which rarely count anything)
    "number": re.compile(
        r"(?<![A-Za-z_\d.])\d+(?:\.\d+)?(?![A-Za-z_\d])"
        r"|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
        r"|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|hundred|dozen)\b"
        r"|[二三四五六七八九十两][十百]?[个种条次类项步层路级段轮]",
        re.I,
    ),
    "list": re.compile(r"[、,，;；]|\band\b"),
    "name": re.compile(r"[A-Z][\w-]+|`|(?<![a-z])[a-z]++_[a-z_]+|[\u4e00-\u9fff]{2,}"),
    "how": re.compile(r"."),
    "identifier": re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"),
    "version": re.compile(r"(?<![\w.])\d+\.\d+(?:\.\d+)*(?![\w.])"),  # 3.11, 5.2, 0.8.0
    # ":5050", "port 8000", "端口 6379"; not a time ("10:30") nor a path's digits
    "port": re.compile(r"(?<![\w.:/]):\d{2,5}(?!\d)|\bport\s*+[:=]?\s*+\d{2,5}(?!\d)|端口\s*+[:：]?\s*+\d{2,5}(?!\d)", re.I),
    # 2025-01-19, 2025/1/19, 1903年, January 2025, in 1903
    "date": re.compile(
        r"(?<!\d)(?:19|20)\d\d[-/.]\d{1,2}(?:[-/.]\d{1,2})?(?!\d)|(?<!\d)\d{3,4}\s*年|\b(?:in|since|until)\s+\d{4}\b"
        r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*+\.?+\s++(?:\d{1,2},?\s++)?(?:19|20)\d\d\b",
        re.I,
    ),
    # A title between book-title marks: "《邵氏闻见录》".
    "works": re.compile(r"《[^《》\n]{1,40}》"),
    # A colour: "红色", "蓝黑近紫色", "体呈银白", "olive-green".
    "colour": re.compile(r"[红橙黄绿青蓝紫黑白灰褐棕粉金银赤乳]+色|体呈|\b(?:red|orange|yellow|green|blue|purple|black|white|grey|gray|brown|pink)(?:ish)?\b", re.I),
    # How an animal lives: where, on what, when it is active.
    "habits": re.compile(r"栖息|觅食|以[^，。；\n]{1,12}为食|食性|杂食|肉食|草食|群居|独居|夜行|昼行|生活于|生活在|繁殖|洄游|\b(?:lives? in|feeds? on|nocturnal|diurnal)\b", re.I),
    # A rank of a living thing's classification: "鸦科动物", "辐鳍鱼纲鲈形目隆头鱼科".
    "taxon": re.compile(r"[\u4e00-\u9fff](?:亚科|亚目|科|属|目|纲)(?![学技室研普生员长于性录])|\b(?:family|genus)\s+[A-Z][a-z]+", re.I),
    # A posthumous or temple name: "谥文毅", "谥号蜀献王", "庙号太宗".
    "posthumous": re.compile(r"谥|庙号|\bposthumous(?:ly)?\b"),
    # Another name given beside the thing's own: "华北陆块又名华北克拉通", "松鸦（学名：…），又名㭴鸟".
    "alias": re.compile(
        r"又名|又称|又叫|亦称|亦名|也称|也叫|别名|别称|俗称|简称|或称|旧称|古称|原名|又作|一称|通称|又译"
        r"|\b(?:also|otherwise|commonly|better) (?:known as|called|named)\b|\bknown as\b|\ba\.?k\.?a\.?\b|\bnicknamed\b",
        re.I),
    # Who someone is, in a design document: a role ("作者: System Architect"), an owner, a team,
    # a handle. Personal names have no pattern to match, and a design document rarely has them
    # outside such lines.
    "person": re.compile(
        r"作者|负责人|所有者|维护者|维护人|团队|小组|部门|架构师|工程师|开发者|审批人|评审人"
        r"|\b(?:author|owner|maintainer|team|architect|engineer|developer|reviewer|approver)s?\b|(?<![\w.])@[A-Za-z]\w+",
        re.I,
    ),
}
# Kinds of fact so particular that holding one tells the answer from the units beside it, which
# hold the general kinds too: "FastAPI 0.128" holds a number, "FastAPI (:5050)" a port; beside
# "文档版本: v3.0（Router→Worker 架构）", which shares more of "Who wrote the Router to Worker
# design?", only "作者: System Architect" names someone; beside columns named created_at, only
# "创建日期: 2025-01-19" holds a date. In encyclopedic text, another name (又名), written works
# (《…》), a colour, an animal's habits (栖息于…), its family (鸦科) or a posthumous name (谥文毅)
# tell the answer from sentences about the same subject as well.
_PARTICULAR_FACTS = ("port", "person", "date", "alias", "works", "colour", "habits", "taxon", "posthumous")
PARTICULAR_FACT = 1.35  # on top of holding a fact of the kinds asked
MISSING_FACT = 0.7  # for lacking the number or time asked for, or the particular kind
# A line of code or configuration that gives a name a literal value ("VectorWeight: 0.7,",
# '"vector_threshold": 0.7,', "TIMEOUT = 30  # s"): a fact a question asking for a number can
# quote, where other code is no answer unless code is asked for.
_SETS_VALUE = re.compile(
    r"""["']?+[A-Za-z_][\w.]*+["']?+\s*+[:=]\s*+(?:[-+]?\d[\d._]*+\s*+[%\w]*+|"[^"\n]{0,80}"|'[^'\n]{0,80}'|true|false|True|False)"""
    r"""\s*+,?+\s*+(?:(?://|#).*)?$"""
)
_VALUE_FACTS = frozenset({"number", "time", "threshold", "version"})
# A key given a word as its value in code or data ('{"status":"execution_log", …}', "mode = 'custom'"):
# the value answers "which status …" when the question names the key, as a value answers "how many".
_KEY_GETS_WORD = re.compile(r"""["']?+([A-Za-z_][\w-]{0,40}+)["']?+\s*+[:=]\s*+["']([A-Za-z_][\w.-]{0,60}+)["']""")
_LATIN_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9_.-]{2,60}+")
# Three letters at least: "bm25", "e5" and "gb50204" are names of their own.
_NAME_AND_VERSION = re.compile(r"([a-z]{3,})\d+")
MAX_TABLE_ROWS = 6
MAX_BLOCK_ITEMS = 6  # of a list, table or code block, quoted after the lead-in that introduces it
GLOSSARY_ROW = 0.5  # what a glossary row counts for when the question asks no definition
KEYED_ROW = 1.5  # how much more a row or key-value line counts when its key names the question's subject
MAX_LEAD_IN_CHARS = 40  # a section title longer than this is a sentence, not a name
CONTEXT_SHARE = 0.4  # how much of the previous unit's coverage a unit inherits
QUESTION_HEADING_COVERAGE = 0.5  # of the question's term weight, for a question heading to count in full
# How much a question's Chinese term counts in the coverage of a unit with no Chinese
# (see _coverage), as in the chat's evidence gate.
UNTRANSLATED_SHARE = 0.5
MEANING_COVERAGE = 0.5  # of the question's term weight, that a unit in the other language meaning all of it covers
MEANING_SCORE = 0.2  # added to any unit's score for meaning all of the question (as the lexical similarity's)
ENGLISH_PROSE_WORDS = 4  # fewer words make a label or a key ("event: intent"), not a sentence
LANGUAGE_MISMATCH = 0.8  # the share of its score a unit keeps when not in the question's language
_PART_BOUNDARY = re.compile(r"[?？;；。]|,\s*(?:and|or)\b|，|\band\b|和|以及|还有")
_ASKS_FOR_CODE = re.compile(r"命令|代码|脚本|示例|例子|怎么运行|如何运行|\bcommand|\bcode\b|\bscript|\bexample|\bcurl\b|\bcli\b|\bsnippet|\bsyntax\b|\bhow do i run\b", re.I)
# A question for the name of a class, function or interface ("记忆接口类叫什么？") is answered by
# the line of code that declares it ("class RAGAgentMemory:"), which is not penalised as code.
_ASKS_CODE_NAME = re.compile(
    r"(?:类|函数|方法|接口|结构体)(?:名|叫什么|是什么|是哪个)|哪个(?:类|函数|方法|接口)"
    r"|\b(?:class|function|method|interface|struct)(?:es|s)?\b.{0,40}\b(?:called|named)\b"
    r"|\b(?:which|what) (?:class|function|method|interface|struct)\b|\bname of the (?:class|function|method|interface)\b",
    re.I,
)
_DECLARES_NAME = re.compile(r"(?:export\s+)?(?:async\s+)?(?:class|def|func|function|interface|type|struct)\s+[A-Za-z_]\w*")
# A sentence that opens by pointing back says its subject in the sentence before it.
_POINTS_BACK = re.compile(r"(?:this|these|that|those|it|they|such)\b|这|此|该|它|上述|以上|其中|其余", re.I)
# Possessive: "\s*…\s*" around nothing would split a long run of spaces every way there is.
_QUESTION_END = re.compile(r"[?？]\s*+[”\"'」]*+\s*+$")
# "Which path carries the highest weight?": the row with the largest number in that column. Not
# 最多 or "at most": "最多保留几条？" asks a limit, not which row holds the most.
EXTREME_ROW = 1.5
_ASKS_HIGHEST = re.compile(r"最高|最大|最长|\b(?:highest|largest|biggest|greatest|maximum|longest)\b", re.I)
_ASKS_LOWEST = re.compile(r"最低|最小|最短|\b(?:lowest|smallest|minimum|shortest)\b", re.I)
# The words that make a heading a question ("有哪几种可见性？"): they say nothing of its subject,
# and would match every question phrased the same way.
_ASKING_WORDS = re.compile(r"哪[几些个]?[种个条类]?|什么|怎么|怎样|如何|多少|几[个种条次类]|吗|呢|\b(?:what|which|who|how|many|much|when|where|why)\b", re.I)


@dataclass(frozen=True)
class Passage:
    """One evidence text, as numbered in the prompt."""

    doc_id: str
    text: str
    rank: int
    section: str = ""
    document: str = ""  # the document's name: "12-document-chat.md"
    title: str = ""  # the document's title: "AI对话功能 - 具体实现逻辑文档"


@dataclass(frozen=True)
class ReaderOptions:
    max_units: int = 3
    max_chars: int = 600
    # A unit (with its section title) must cover this share of the question's term weight.
    # Low on purpose: the chat's gate has already refused evidence that holds less than half
    # of the question's words; here words of the question's phrasing ("allowed", "values")
    # that no passage uses weigh as much as the rarest term.
    min_coverage: float = 0.2
    companion_ratio: float = 0.65  # a second or third unit must score this share of the best
    rank_decay: float = 0.15
    # How an encoder's cosine reads as meaning (see _meaning): below meaning_floor, as unrelated
    # texts score against a question; meaning_floor + meaning_span and above, a paraphrase.
    meaning_floor: float = 0.2
    meaning_span: float = 0.3


DEFAULT_OPTIONS = ReaderOptions()


@dataclass(frozen=True)
class Pick:
    doc_id: str
    unit: Unit
    score: float
    coverage: float


@dataclass(frozen=True)
class Reading:
    picks: tuple[Pick, ...]
    answer_types: frozenset[str]


@dataclass(frozen=True)
class _Scored:
    passage: Passage
    unit: Unit
    terms: frozenset[str]
    score: float
    coverage: float
    keyed: bool = False  # a table row or key-value line whose key the question names


def declares_asked_name(question: str, text: str) -> bool:
    """Whether a line of code declares the class, function or interface whose name question asks."""
    return _ASKS_CODE_NAME.search(question) is not None and _declares_name(text)


def _declares_name(text: str) -> bool:
    return _DECLARES_NAME.match(text.strip()) is not None


def expected_answer_types(question: str) -> frozenset[str]:
    """The kinds of fact the question asks for (number, time, threshold, list, name)."""
    return frozenset(kind for kind, pattern in _TYPE_PATTERNS.items() if pattern.search(question))


@dataclass(frozen=True)
class _Asked:
    """One question as the scorer needs it, read once for all units."""

    text: str
    variants: tuple[set[str], ...]  # its terms, then those of each cross-language variant
    weights: Counter[str]
    types: frozenset[str]
    wants_code: bool
    similarity: Similarity | None
    options: ReaderOptions
    language: str = "en"
    encoder: Similarity | None = None
    asks_code_name: bool = False  # for a class's or function's name (_ASKS_CODE_NAME)
    words: frozenset[str] = frozenset()  # its words in Latin letters, casefolded


    def declared(self, unit: Unit) -> bool:
        """Whether unit is the line of code that declares the name asked for."""
        return self.asks_code_name and _declares_name(unit.text)


@dataclass(frozen=True)
class _Located:
    """A unit with what surrounds it: its passage, section title and the unit before it."""

    passage: Passage
    unit: Unit
    terms: frozenset[str]
    section: frozenset[str]
    before: frozenset[str]
    # When the section title is a question (an FAQ's "How many stages are there?"), the terms it
    # asks about; its body is its answer ("8: S1 memory, S2 rewrite, …") and need not repeat them.
    asks: frozenset[str] = frozenset()
    # A table row whose first cell or name (Unit.name), or a key-value line whose key ("rrf_k: 60"),
    # the question names as written ("…answers 429?", "fusion_agent 会同时跑…"): the fact kept for
    # what was asked.
    keyed: bool = False
    # A row whose first cell is the number the question asks by ordinal ("第 7 个节点" → 序号 7):
    # the question's words are in its header and section, the row is what was asked.
    numbered: bool = False
    # For a lead-in: the terms of the list, table or code block it introduces.
    block: frozenset[str] = frozenset()
    # A glossary's row (_GLOSSARY_ROW) when the question does not ask what its term is.
    glossary_aside: bool = False


def read(
    question: str,
    passages: Sequence[Passage],
    *,
    tokenize: Tokenize,
    similarity: Similarity | None = None,
    expand: Expand | None = None,
    options: ReaderOptions = DEFAULT_OPTIONS,
    encoder: Similarity | None = None,
) -> Reading:
    """Choose the units of passages that answer question, best first.

    A compound question ("何时打开？半开时做什么？") is read once whole, then once per part,
    each part adding its best unit, so every part gets an answer. encoder, when given, is a
    sentence encoder's similarity; one with a prepare(texts) method gets every text at once,
    when the reading needs them.
    """
    tokenize = _with_names_of_versions(tokenize)
    located = _locate(passages, tokenize, question)
    weights = _idf([item.terms for item in located])

    def read_one(text: str) -> list[Pick]:
        asked = _ask(text, weights, tokenize=tokenize, similarity=similarity, expand=expand, options=options)
        scored = _with_extreme_rows([_score(asked, item) for item in located], asked, tokenize)
        if encoder is not None and not _answered_in_own_language(scored, asked):
            # No unit in the question's language covers it: the other language's units are
            # read for what they mean. Where one does, its words say more than the encoder.
            if hasattr(encoder, "prepare"):
                encoder.prepare([text, *(item.unit.text for item in located)])
            scored = _with_extreme_rows([_score(dataclasses.replace(asked, encoder=encoder), item) for item in located], asked, tokenize)
        return _compose(scored, asked)

    picks = read_one(question)
    for part in _parts(question):
        best = read_one(part)[:1]
        if best and len(picks) < options.max_units and all(best[0].unit.text != p.unit.text for p in picks):
            picks.append(best[0])
    return Reading(tuple(picks), expected_answer_types(question))


def _with_extreme_rows(scored: list[_Scored], asked: _Asked, tokenize: Tokenize) -> list[_Scored]:
    """scored, where the question asks for the highest or lowest of a table's column ("which
    path carries the highest weight?"), with the row holding that extreme scored EXTREME_ROW
    times its table's best row, and covering as much: its words are no closer to the question
    than the other rows', its number is what answers."""
    direction = _extreme_asked(asked.text)
    if direction == 0:
        return scored
    terms = set().union(*asked.variants)  # a column named in the question's words or their translation
    tables: dict[tuple[int, int], list[_Scored]] = {}
    for s in scored:
        if s.unit.kind == "row" and s.unit.table >= 0:
            tables.setdefault((id(s.passage), s.unit.table), []).append(s)
    extremes: dict[int, tuple[float, float]] = {}
    for rows in tables.values():
        cells = [row_cells(s.unit.text) for s in rows]
        for column in dict.fromkeys(name for row in cells for name in row):
            if not terms & set(tokenize(column)):
                continue
            numbers = [(value, n) for n, row in enumerate(cells) if (value := _first_number(row.get(column, ""))) is not None]
            if len(numbers) >= 2:
                best = max(numbers, key=lambda pair: direction * pair[0])
                if sum(1 for value, _ in numbers if value == best[0]) == 1:
                    extremes[id(rows[best[1]])] = (max(s.score for s in rows), max(s.coverage for s in rows))
    return [
        dataclasses.replace(s, score=extremes[id(s)][0] * EXTREME_ROW, coverage=extremes[id(s)][1]) if id(s) in extremes else s
        for s in scored
    ]


def _extreme_asked(question: str) -> int:
    """1 when question asks for the highest of something, -1 for the lowest, else 0."""
    if _ASKS_HIGHEST.search(question):
        return 1
    return -1 if _ASKS_LOWEST.search(question) else 0


def _first_number(cell: str) -> float | None:
    match = re.search(r"-?\d+(?:\.\d+)?", cell)
    return float(match[0]) if match else None


def _with_names_of_versions(tokenize: Tokenize) -> Tokenize:
    """tokenize, plus the name in a name glued to its version: "python3" also says "python"
    ("需要什么版本的 Python" is answered by "要求：python3 3.11 及以上")."""

    def terms(text: str) -> list[str]:
        found = tokenize(text)
        return found + [term for token in found if (m := _NAME_AND_VERSION.fullmatch(token)) for term in tokenize(m[1])]

    return terms


def _name_words(name: str) -> str:
    """The words of a document's file name: "12-document-chat.md" → "document chat"."""
    stem = re.sub(r"\.\w{1,5}$", "", name)
    return re.sub(r"^\d+[-_ ]*|[-_]+", " ", stem)


def _telling_title_terms(passages: Sequence[Passage], tokenize: Tokenize) -> dict[str, frozenset[str]]:
    """Each passage's document's title terms that no other document's title among the passages
    holds: "设计文档" ends most titles of a design KB and tells its documents apart no more than
    the question's "design" tells which one it asks about."""
    terms = {passage.document: frozenset(tokenize(passage.title)) for passage in passages}
    shared = Counter(term for title in terms.values() for term in title)
    return {document: frozenset(term for term in title if shared[term] == 1) for document, title in terms.items()}


def _locate(passages: Sequence[Passage], tokenize: Tokenize, question: str = "") -> list[_Located]:
    located: list[_Located] = []
    names = _names_in(question)
    ordinals = _ordinals_in(question)
    titles = _telling_title_terms(passages, tokenize)
    asks_definition = bool(_ASKS_DEFINITION.search(question))
    for passage in passages:
        # The document's name and title frame every section in it: "confidence below 0.65 becomes
        # clarify" in 12-document-chat.md answers "文档对话的意图置信度…" (document chat), not the chat's.
        asked_terms = frozenset(tokenize(_ASKING_WORDS.sub(" ", strip_numbering(passage.section))))
        section = asked_terms | frozenset(tokenize(_name_words(passage.document))) | titles[passage.document]
        asks = asked_terms if _QUESTION_END.search(passage.section) else frozenset()
        before = declared = frozenset()
        for unit in split_units(passage.text):
            terms = frozenset(tokenize(unit.text))
            numbered = unit.kind == "row" and unit.key.strip() in ordinals
            aside = not asks_definition and bool(_GLOSSARY_ROW.match(unit.text))
            named = bool(unit.key) and (names(unit.key) or numbered) or bool(unit.name) and names(unit.name)
            keyed = named and not aside
            # A comment heading a group of fields ("# Agent 特有字段") is in the class declared
            # above it, as much as the group before it is: both read with that line.
            context = declared if declared and unit.is_lead_in and unit.text.startswith(("#", "//")) else before
            located.append(
                _Located(passage, unit, terms, section, context, asks, keyed, numbered, glossary_aside=aside)
            )
            before = terms
            if _declares_name(unit.text):
                declared = terms
    return _with_block_terms(located)


def _with_block_terms(located: list[_Located]) -> list[_Located]:
    """located, each lead-in given the terms of the block it introduces (the units after it
    in its passage that share its block)."""
    held: dict[tuple[int, int], set[str]] = {}
    for item in located:
        if item.unit.block >= 0 and not item.unit.is_lead_in:
            held.setdefault((id(item.passage), item.unit.block), set()).update(item.terms)
    return [
        dataclasses.replace(item, block=frozenset(held.get((id(item.passage), item.unit.block), ())))
        if item.unit.is_lead_in and item.unit.block >= 0 else item
        for item in located
    ]


# A glossary's row ("术语：SSE，说明：Server-Sent Events…") says what its term means: it is the
# fact asked only when the question asks what the term is, not whenever it names the term.
_GLOSSARY_ROW = re.compile(r"(?:术语|名词|缩写|term|glossary)[:：]", re.IGNORECASE)
_ASKS_DEFINITION = re.compile(
    r"是什么|什么是|指什么|含义|意思|全称|\bwhat (?:is|are) (?:an? |the )?[\w-]+\s*\??$|\bstands? for\b|\bmeans?\b|\bdefin",
    re.IGNORECASE,
)
# "第 7 个节点是什么", "the 3rd stage", "step 2": the row numbered so in a table's first column
# (序号 7) is the one asked about, though a lone digit is too short a name to match otherwise.
_ORDINAL = re.compile(r"第\s*(\d+)|\b(\d+)(?:st|nd|rd|th)\b|\b(?:step|stage|node|row|item|no\.?|number)\s*#?(\d+)\b", re.IGNORECASE)


def _ordinals_in(question: str) -> frozenset[str]:
    return frozenset(number for match in _ORDINAL.finditer(question) for number in match.groups() if number)


def _names_in(question: str) -> Callable[[str], bool]:
    """Whether question holds a text as written: a whole word or name ("429" in "answers 429?",
    not in "4290"; "KB" not in "KBs"), or, in Chinese, anywhere."""
    folded = question.casefold()

    def names(text: str) -> bool:
        text = " ".join(text.casefold().split())
        if len(text) < 2:
            return False
        return re.search(rf"(?<![\w-]){re.escape(text)}(?![\w-])", folded) is not None or (has_cjk(text) and text in folded)

    return names


def _ask(
    question: str, weights: Counter[str], *,
    tokenize: Tokenize, similarity: Similarity | None, expand: Expand | None, options: ReaderOptions,
    encoder: Similarity | None = None,
) -> _Asked:
    types = expected_answer_types(question)
    subject = _ANSWER_KIND_WORDS.sub(" ", question) if "identifier" in types else question
    variants = [set(tokenize(q)) for q in (expand(subject) if expand else [subject])]
    variants = [terms for terms in variants if terms] or [set()]
    wants_code = _ASKS_FOR_CODE.search(question) is not None
    return _Asked(
        question, tuple(variants), weights, types, wants_code, similarity, options, text_language(question), encoder,
        _ASKS_CODE_NAME.search(question) is not None, frozenset(w.casefold() for w in _LATIN_WORD.findall(question)),
    )


def _score(asked: _Asked, item: _Located) -> _Scored:
    """A unit's score: its coverage of the question, then what makes it more or less an answer."""
    if not item.unit.is_answer or _is_contents(item.passage.section):
        return _Scored(item.passage, item.unit, item.terms, 0.0, 0.0)
    untranslated = UNTRANSLATED_SHARE if asked.language == "zh" and not has_cjk(item.unit.text) else 1.0
    # For a question asking a list, a lead-in and the list, table or code block it introduces
    # read as one unit: "事件会被…归一化为稳定结构：" says what {"status":"start"}, {"status":
    # "progress"}… below it are. An example it introduces illustrates it and lists nothing.
    lists = "list" in asked.types and not _INTRODUCES_EXAMPLE.search(item.unit.text)
    said = item.terms | item.block if lists else item.terms
    coverage = max(
        _coverage(q, said, item.section, asked.weights, _section_share(q, item, asked), untranslated)
        for q in asked.variants
    )
    # A sentence continues the one before it: "…与向量两路混合。默认 RRF 融合（向量 0.7 / BM25 0.3）"
    # answers "混合检索的权重" with its second sentence, which names neither.
    context = max(_coverage(q, item.before - said, frozenset(), asked.weights) for q in asked.variants)
    coverage = min(1.0, coverage + CONTEXT_SHARE * context)
    meaning = _meaning(asked, item.unit.text)
    if meaning and _language_of(item.unit.text, asked) != asked.language:
        # The words of a question in the other language are not the unit's to share: what it
        # means stands in for them, beside the names and numbers both still share.
        coverage = min(1.0, coverage + MEANING_COVERAGE * meaning)
    if item.numbered:
        coverage = max(coverage, QUESTION_HEADING_COVERAGE)
    if len(item.asks) >= 2 and any(item.asks <= q for q in asked.variants):
        # Under an FAQ entry that asks a narrower form of the question ("文档状态有哪些？" for
        # "文档在摄取过程中会经历哪些状态？"): its answer covers the question's subject.
        coverage = max(coverage, QUESTION_HEADING_COVERAGE)
    introduces_list = "list" in asked.types and item.unit.is_lead_in and coverage >= QUESTION_HEADING_COVERAGE
    score = coverage * _fitness(asked, item, introduces_list)
    if asked.similarity is not None:
        score += 0.2 * max(0.0, asked.similarity(asked.text, item.unit.text))
    score += MEANING_SCORE * meaning
    score /= 1 + asked.options.rank_decay * item.passage.rank
    return _Scored(item.passage, item.unit, item.terms, score, coverage, item.keyed)


# "Milvus 过滤表达式示例:" introduces an illustration, not the items a list question asks for.
_INTRODUCES_EXAMPLE = re.compile(r"示例|例如|举例|样例|\bexamples?\b|\be\.g\.", re.IGNORECASE)
# A table of contents lists the document's headings: none of its lines answers anything.
_CONTENTS = re.compile(r"^(?:目\s*录|contents|table of contents|toc)$", re.IGNORECASE)


@lru_cache(maxsize=256)
def _is_contents(section: str) -> bool:
    return _CONTENTS.match(strip_markdown(strip_numbering(section)).strip()) is not None


def _answered_in_own_language(scored: Sequence[_Scored], asked: _Asked) -> bool:
    """Whether a unit in the question's language covers enough of it to lead an answer."""
    covered = any(
        s.coverage >= asked.options.min_coverage and _language_of(s.unit.text, asked) == asked.language for s in scored
    )
    # Over Chinese evidence, an English question's words match code and keys ("event: intent"),
    # which say nothing of the answer's language: there, only English prose counts, or a line
    # that sets the value asked for ('"vector_threshold": 0.7,' for "what vector threshold").
    return covered and (asked.language != "en" or any(_answers_in_english(s.unit, asked) for s in scored))


def _answers_in_english(unit: Unit, asked: _Asked) -> bool:
    if has_cjk(unit.text):
        return False
    if asked.types & _VALUE_FACTS and _SETS_VALUE.match(unit.text):
        return True
    return not unit.is_code and len(unit.text.split()) >= ENGLISH_PROSE_WORDS


def _meaning(asked: _Asked, text: str) -> float:
    """The encoder's similarity of text to the question, from 0 (no more than unrelated texts
    reach) to 1 (a close paraphrase); 0 without an encoder."""
    if asked.encoder is None:
        return 0.0
    floor, span = asked.options.meaning_floor, asked.options.meaning_span
    return min(1.0, max(0.0, (asked.encoder(asked.text, text) - floor) / span))


def _language_of(text: str, asked: _Asked) -> str:
    """zh or en as the question counts it: for a Chinese question, text mostly in Chinese; for
    an English one, any Chinese at all (see _language_share)."""
    if asked.language == "zh":
        return "zh" if text_language(text) == "zh" else "en"
    return "zh" if has_cjk(text) else "en"


def _fitness(asked: _Asked, item: _Located, introduces_list: bool = False) -> float:
    """How much a unit reads as an answer, whatever words it shares: a multiplier.

    introduces_list: the unit is a lead-in that names what a list question asks for ("SelectedSection
    结构:" above its fields' table): it holds the list it introduces."""
    unit, facts = item.unit, asked.types - {"how"}
    factor = 1.0
    if max(_coverage(q, frozenset(), item.section, asked.weights) for q in asked.variants) >= 0.15:
        factor *= 1.25  # its section is about the question: "6.1 Five-factor scorer" for "how does the five-factor … score"
    if facts and (any(_holds_fact(kind, unit.text, asked) for kind in facts) or introduces_list):
        factor *= 1.35
    elif "number" in facts or "time" in facts:
        factor *= MISSING_FACT
    for kind in facts.intersection(_PARTICULAR_FACTS):
        factor *= PARTICULAR_FACT if _FACT_PATTERNS[kind].search(unit.text) else MISSING_FACT
    # "This suits Chinese extractive QA sets" repeats "Which format suits Chinese extractive QA
    # sets?" but for "This": what it points back to is the answer, and is quoted with it.
    said = item.terms | item.before if _POINTS_BACK.match(unit.text) else item.terms
    if not said - asked.variants[0] and not unit.is_lead_in:
        factor *= 0.2  # repeats the question's words and adds nothing (a lead-in adds its block)
    if _QUESTION_END.search(unit.text):
        factor *= 0.3  # a question in the sources is not an answer
    if item.keyed:
        factor *= KEYED_ROW
    if item.glossary_aside:
        factor *= GLOSSARY_ROW
    if is_heading_of(unit.text, item.passage.section):
        factor *= 0.1  # a heading names what its section is about; the answer is in the section
    if asked.declared(unit):
        factor *= 1.35  # the name asked for, as a number is to "how many"
    elif unit.is_code and not asked.wants_code and not (facts & _VALUE_FACTS and _SETS_VALUE.match(unit.text)) and not (
        "name" in facts and _gives_named_key_a_word(unit.text, asked)
    ):
        factor *= 0.1
    if len(unit.text.replace(" ", "")) < 6:
        factor *= 0.5
    if len(item.terms) > 30:
        factor *= math.sqrt(30 / len(item.terms))  # a long list of topics covers words, not the question
    return factor


def _gives_named_key_a_word(text: str, asked: _Asked) -> bool:
    """Whether text gives a key the question names a word the question does not hold (_KEY_GETS_WORD)."""
    return any(
        key.casefold() in asked.words and value.casefold() not in asked.words for key, value in _KEY_GETS_WORD.findall(text)
    )


def _holds_fact(kind: str, text: str, asked: _Asked) -> bool:
    """Whether text holds a fact of the kind asked. A name asked in English is one in Latin
    letters that the question does not hold: over Chinese text, "networkx" answers "which graph
    library…", a Chinese phrase about the backend does not."""
    if kind == "name" and asked.language == "en":
        return any(word.casefold() not in asked.words for word in _LATIN_WORD.findall(text))
    return bool(_FACT_PATTERNS[kind].search(_new_text(text, asked.text)))


def _section_share(question: set[str], item: _Located, asked: _Asked) -> float:
    """How much a question term counts when only the unit's section title holds it: all of it
    under a heading that asks most of question, or for an item of a list, asked for, under a
    heading that names most of it ("实体消歧三阶段" for "实体消歧分为哪三个阶段？"); else half."""
    heads_answer = bool(item.asks) or (item.unit.kind == "item" and "list" in asked.types)
    asks_this = heads_answer and _coverage(question, item.section, frozenset(), asked.weights) >= QUESTION_HEADING_COVERAGE
    return 1.0 if asks_this else 0.5


def _coverage(
    question: set[str], unit: frozenset[str], section: frozenset[str], weights: Counter[str],
    section_share: float = 0.5, untranslated_share: float = 1.0,
) -> float:
    """Share of question's term weight in unit; terms only in its section title count section_share.

    With untranslated_share below 1 (a unit with no Chinese), the Chinese terms of a question
    that shares two terms or more with the unit weigh that much: words the term map left
    untranslated, which the unit could not hold in any wording.
    """
    if not question:
        return 0.0
    default = max(weights.values(), default=1.0)
    shared = question & unit
    if untranslated_share < 1.0 and len(shared) >= 2:
        total = sum(weights.get(t, default) * (untranslated_share if has_cjk(t) else 1.0) for t in question)
    else:
        total = sum(weights.get(t, default) for t in question)
    held = sum(weights.get(t, default) for t in shared)
    held += section_share * sum(weights.get(t, default) for t in (question & section) - unit)
    return held / total


def _compose(scored: Sequence[_Scored], asked: _Asked) -> list[Pick]:
    """The best unit, then companions that add to it, or the table or command it introduces."""
    question, types, options, wants_code = asked.variants[0], asked.types, asked.options, asked.wants_code
    ranked = sorted(scored, key=lambda s: (-s.score, s.passage.rank, s.unit.position))
    if not ranked:
        return []
    # A keyed row leads the answer without crowding out the units that would have joined it.
    best = ranked[0].score / (KEYED_ROW if ranked[0].keyed else 1.0)
    # The answer opens in the question's language when a unit in it scores nearly as well; the
    # companions still come from either language (a question may need documents in both).
    leads = [s for s in ranked[:5] if s.coverage >= options.min_coverage]
    if not leads:
        return []
    lead = max(leads, key=lambda s: s.score * _language_share(s, asked))
    ranked = [lead, *(s for s in ranked if s is not lead)]
    chosen: list[_Scored] = []
    covered: set[str] = set()
    used = 0
    for candidate in ranked:
        if len(chosen) == options.max_units or candidate.score < best * options.companion_ratio:
            break
        new = candidate.terms - covered
        if chosen and (not new - question or used + len(candidate.unit.text) > options.max_chars):
            continue  # says nothing the chosen units have not said, or too long
        if any(candidate.unit.text == c.unit.text for c in chosen):
            continue
        chosen.append(candidate)
        covered |= candidate.terms
        used += len(candidate.unit.text)
    if not chosen:  # the lead scores below the companions' bar: no unit answers well enough
        return []
    # "How does the five-factor scorer rank?" is answered by its table even when a sentence
    # elsewhere shares a word more: a row among the best three brings its whole table.
    row = next((s for s in ranked[:3] if s.unit.table >= 0 and s.score >= best * options.companion_ratio), None)
    table = _whole_table(row, scored) if row is not None and {"how", "list"} & types else []
    if table and row is not ranked[0] and chosen[0].passage is not row.passage:
        # The best unit is in another passage than a row that came second or third: it answers,
        # not that row's table ("how are the vector and BM25 scores weighted?": VectorWeight
        # 0.7, BM25Weight 0.3, not the reranker's table of weights in another document).
        table = []
    chosen = table or _with_antecedents(_with_declaration(_with_follow_on(chosen, scored, types, wants_code), scored, asked), scored)
    chosen = _with_blocks(chosen, scored, options.max_chars, wants_all=bool({"how", "list"} & types))
    return [Pick(s.passage.doc_id, s.unit, s.score, s.coverage) for s in chosen]


def _language_share(scored: _Scored, asked: _Asked) -> float:
    """1 for a unit plainly in the question's language, else LANGUAGE_MISMATCH: Chinese for a
    Chinese question; for an English one, no Chinese at all ("反馈：is_positive、comment、query"
    is neither)."""
    text = scored.unit.text
    plain = text_language(text) == "zh" if asked.language == "zh" else not has_cjk(text)
    return 1.0 if plain else LANGUAGE_MISMATCH


def _whole_table(best: _Scored, scored: Sequence[_Scored]) -> list[_Scored]:
    """A "how"/"which" question answered by a table row: the table's rows, in order.

    "How does the five-factor reranker score?" is answered by all five factors, not the one
    row that happens to share the most words with the question. A longer table is a reference
    list, not an answer: none then, and the best units answer.
    """
    rows = [s for s in scored if s.passage is best.passage and s.unit.table == best.unit.table]
    return rows if len(rows) <= MAX_TABLE_ROWS else []


def _with_follow_on(chosen: list[_Scored], scored: Sequence[_Scored], types: frozenset[str], wants_code: bool) -> list[_Scored]:
    """The best unit with what it introduces: the table after "scored as follows", the
    command after "ingest a folder with one command" when a command is asked for."""
    best = chosen[0]
    following = [s for s in scored if s.passage is best.passage and s.unit.position > best.unit.position]
    if not following:
        return chosen
    after = following[0]
    if after.unit.table >= 0 and {"how", "list"} & types:
        rows = [s for s in following if s.unit.table == after.unit.table]
        return [best, *rows] if len(rows) <= MAX_TABLE_ROWS else chosen
    if wants_code and after.unit.is_code and not best.unit.is_code:
        return [best, after, *[s for s in chosen[1:] if s is not after]][:3]
    return chosen


def _with_declaration(chosen: list[_Scored], scored: Sequence[_Scored], asked: _Asked) -> list[_Scored]:
    """The chosen units with, second, the line of code their passages declare the asked-for
    class or function by ("class RAGAgentMemory:" beside "统一的 Memory 接口"): it shares few of
    the question's words, and is the name asked."""
    if not asked.asks_code_name or not chosen or any(asked.declared(s.unit) for s in chosen):
        return chosen
    passages = {id(s.passage) for s in chosen}
    declared = [s for s in scored if id(s.passage) in passages and asked.declared(s.unit)]
    if not declared:
        return chosen
    best = max(declared, key=lambda s: s.score)
    return [chosen[0], best, *chosen[1:]]


def _with_blocks(chosen: list[_Scored], scored: Sequence[_Scored], max_chars: int, *, wants_all: bool = False) -> list[_Scored]:
    """Each chosen lead-in with the first items of the block it introduces ("5 个处理器链式执行:"
    and the processors), and each chosen item, row or code line with its lead-in before it.

    An item stays a precise answer ("rrf_k: 60"): only its lead-in joins it, unless the question
    asks for a list or how something works (wants_all), which the whole block answers (a list
    right under a heading, which has no lead-in, too). Items are taken in order while they fit
    in max_chars, so a long list is quoted from its start.
    """
    blocks: dict[tuple[int, int], list[_Scored]] = {}
    for s in scored:
        if s.unit.block >= 0:
            blocks.setdefault((id(s.passage), s.unit.block), []).append(s)
    out: list[_Scored] = []
    taken: set[int] = set()
    picked = {id(s) for s in chosen}
    used = sum(len(s.unit.text) for s in chosen)

    def take(s: _Scored) -> None:
        if id(s) not in taken:
            taken.add(id(s))
            out.append(s)

    for s in chosen:
        block = blocks.get((id(s.passage), s.unit.block), [])
        lead = block[0] if block and block[0].unit.is_lead_in and len(block) > 1 else None
        if lead is None and wants_all and len(block) > 1:
            # The list right under a heading ("实体消歧三阶段": its three items) has no lead-in:
            # asked for a list, its items answer together, in order.
            for item in block[:MAX_BLOCK_ITEMS]:
                if id(item) not in picked and id(item) not in taken:
                    if used + len(item.unit.text) > max_chars:
                        break
                    used += len(item.unit.text)
                take(item)
            take(s)
            continue
        if lead is None or id(lead) in taken:
            take(s)
            continue
        used += 0 if id(lead) in picked else len(lead.unit.text)
        take(lead)
        if wants_all or not any(id(item) in picked for item in block[1:]):
            for item in block[1 : 1 + MAX_BLOCK_ITEMS]:
                if id(item) not in picked:
                    if used + len(item.unit.text) > max_chars:
                        break
                    used += len(item.unit.text)
                take(item)
        take(s)
    return out


def _with_antecedents(chosen: list[_Scored], scored: Sequence[_Scored]) -> list[_Scored]:
    """Each chosen sentence that points back ("This suits Chinese extractive QA sets…") with
    the sentence it points to ("--format squad reads SQuAD JSON."), which holds what it says."""
    with_before: list[_Scored] = []
    for s in chosen:
        if s.unit.kind == "sentence" and _POINTS_BACK.match(s.unit.text):
            before = next((b for b in scored if b.passage is s.passage and b.unit.position == s.unit.position - 1), None)
            if before is not None and before.unit.kind == "sentence" and before not in chosen and before not in with_before:
                with_before.append(before)
        if s not in with_before:
            with_before.append(s)
    return with_before


def _parts(question: str) -> list[str]:
    """The parts of a compound question ("How many stages, and what does the probe do?"),
    so a unit answering one part is measured against that part."""
    parts = [p.strip() for p in _PART_BOUNDARY.split(question) if p.strip()]
    return parts if len(parts) > 1 else []


def _new_text(text: str, question: str) -> str:
    """text without the digits the question itself holds, so "top 5" asked is not "5" found.

    A number asked stands alone ("5", not the 5 of "2.5"): it is a whole run of digits and dots.
    Read once over text, not once per number, as the question may hold thousands.
    """
    asked = _numbers_in(question)
    if not asked:
        return text
    return _DIGIT_RUN.sub(lambda run: " " if run[0] in asked else run[0], text)


_DIGIT_RUN = re.compile(r"[\d.]+")


@lru_cache(maxsize=64)  # one question is compared with every unit
def _numbers_in(question: str) -> frozenset[str]:
    return frozenset(re.findall(r"\d+(?:\.\d+)?", question))


def _idf(unit_terms: Sequence[frozenset[str]]) -> Counter[str]:
    df = Counter(term for terms in unit_terms for term in terms)
    total = len(unit_terms)
    return Counter({term: math.log(1 + (total + 1) / count) for term, count in df.items()})


def lead_in(question: str, section: str, picks: Sequence[Pick], *, tokenize: Tokenize, expand: Expand | None = None) -> str:
    """The lead unit's section title, when it names what the quoted units leave unsaid.

    "Which import format suits CMRC 2018?" is answered by "Paragraphs become documents … This
    suits Chinese extractive QA sets such as CMRC 2018." under "4.2 SQuAD format": only the title
    says "SQuAD". A title is worth showing when it shares a term with the question (it is about
    what was asked) and holds one that neither the question nor the units hold; a title phrased
    as a question (an FAQ's) only repeats the question.
    """
    title = strip_markdown(strip_numbering(section)).strip()
    if not title or len(title) > MAX_LEAD_IN_CHARS or _QUESTION_END.search(title):
        return ""
    tokenize = _with_names_of_versions(tokenize)
    named = set(tokenize(title))
    asked = [set(tokenize(q)) for q in (expand(question) if expand else [question])]
    said = {term for pick in picks for term in tokenize(pick.unit.text)}
    about_question = any(named & terms for terms in asked)
    return title if about_question and named - asked[0] - said else ""


def addresses_question(question: str, sentence: str, tokenize: Tokenize, expand: Expand | None = None) -> bool:
    """Whether sentence speaks to question: a shared content term and something more, or the
    kind of fact asked for ("How many stages?" → "There are eight … 8")."""
    asked = [set(tokenize(q)) for q in (expand(question) if expand else [question])]
    said = set(tokenize(sentence))
    if not any(asked):
        return True  # nothing to compare: a question of stop words only
    if any(terms & said for terms in asked):
        return bool(said - asked[0])
    types = expected_answer_types(question)
    return any(_FACT_PATTERNS[kind].search(_new_text(sentence, question)) for kind in types & {"number", "time"})
