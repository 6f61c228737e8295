"""Read entities and relations out of a paragraph of text, offline, in Chinese and English.

A rule extractor: a term dictionary matched first (built-in technical terms plus the KB's
own headings and tags), then noun phrases (jieba part-of-speech tags for Chinese; CamelCase,
acronyms, versioned names, code names and Title Case phrases for English), then relations:
the relation words found between two mentions of one sentence (English and Chinese words
share one set of snake_case relation types), the stage → shortcut, layer and priority
patterns, what the text's structure states (`graphrag.structure`: headings, table rows,
key-value lines, code identifiers), and a weak co-occurrence between each name and the next
few names of its paragraph.

Everything here is a pure function of the text and the dictionary, so it is cheap to test
and to run on a worker: no database, no model.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

from knowledge.analysis import ENGLISH_STOP_WORDS

from .models import EntityType
from .structure import StructuralFacts, code_identifiers, structural_facts

T = EntityType

# Built-in technical terms, with their node type.
BUILTIN_TERMS: dict[str, str] = {
    **dict.fromkeys(
        ["StreamChatPipeline", "GraphRAG", "DeepSearch", "Fusion GraphRAG", "LightRAG", "HippoRAG", "RAPTOR",
         "HyDE", "RRF", "BM25", "Reciprocal Rank Fusion", "Plan-Execute-Report", "ReAct", "MCP", "SSE",
         "WebSocket", "RAG", "Agentic RAG", "OCR", "PageRank", "Map-Reduce", "JSON", "HTTP", "REST",
         "OpenAI", "ASGI", "CSRF", "Markdown", "PDF", "DOCX", "LLM", "embedding", "rerank", "jieba",
         "Tika", "nDCG", "cosine"],
        T.TECHNOLOGY,
    ),
    **dict.fromkeys(
        ["Neo4j", "Milvus", "pgvector", "Redis", "S3", "PostgreSQL", "SQLite", "Elasticsearch", "FAISS",
         "RabbitMQ", "MinIO", "Chroma", "Qdrant"],
        T.STORAGE,
    ),
    **dict.fromkeys(
        ["Django", "Celery", "Channels", "HTMX", "FastAPI", "LangChain", "LangGraph", "LlamaIndex",
         "Next.js", "React", "Daphne", "networkx", "numpy", "rank-bm25", "Playwright", "pytest"],
        T.FRAMEWORK,
    ),
    **dict.fromkeys(
        ["GLM-4", "Qwen", "bge-m3", "BGE-Reranker", "e5-small", "multilingual-e5-small", "GPT-4",
         "text-embedding-3-small", "DeepSeek", "ChatGLM", "Claude"],
        T.MODEL,
    ),
    **dict.fromkeys(["Docker", "K8s", "Kubernetes", "Caddy", "Nginx", "calculator", "manage.py"], T.TOOL),
    **dict.fromkeys(["MRR", "recall@10", "nDCG@10", "p50", "p95", "latency", "precision", "F1"], T.METRIC),
}

# Relation words between two mentions of one sentence: (pattern, relation). Both languages
# name a relation by the same snake_case type, so "A 使用 B" and "A uses B" are one relation;
# the more specific words come first ("based on" before "uses", "calls" before "uses").
_EN_RELATIONS: tuple[tuple[str, str], ...] = (
    (r"\b(?:is|are) (?:a|an) (?:part|component|module|member) of\b|\bpart of\b|\bbelongs? to\b", "part_of"),
    (r"\b(?:is|are) (?:a|an|the|one of the)\b(?: \w+)?(?: (?:kind|type|form) of)?", "is_a"),
    (r"\b(?:includes?|including|contains?|consists? of|is made of|comprises?)\b", "contains"),
    (r"\b(?:calls?|calling|invokes?)\b", "calls"),
    (r"\b(?:based on|built on|builds? on)\b", "based_on"),
    (r"\b(?:uses?|using|used by|relies on)\b", "uses"),
    (r"\b(?:supports?|enables?|allows?)\b", "supports"),
    (r"\b(?:integrates? with|combines? with|fuses?|merges? with|together with)\b", "integrates_with"),
    (r"\b(?:depends? on|requires?|needs?|after)\b", "depends_on"),
    (r"\b(?:replaces?|instead of|supersedes?|falls back to)\b", "replaces"),
    (r"\b(?:extends?|inherits? from)\b", "extends"),
    (r"\b(?:located in|lies in|situated in)\b", "located_in"),
    (r"\b(?:born in)\b", "born_in"),
    (r"\b(?:founded|established|created)\b", "founded"),
)
_ZH_RELATIONS: tuple[tuple[str, str], ...] = (
    (r"是.{0,8}的(?:一部分|组成部分|子模块|成员)|属于|隶属于", "part_of"),
    (r"是一种|是一个|是一类|是一款|是一家|是一座|是一位|是一部", "is_a"),
    (r"包含|包括|由.{0,6}组成|分为|含有", "contains"),
    (r"调用", "calls"),
    (r"基于|建立在", "based_on"),
    (r"使用|采用|利用|借助", "uses"),
    (r"支持|允许|提供", "supports"),
    (r"融合|结合|合并", "integrates_with"),
    (r"依赖|需要|取决于|之后", "depends_on"),
    (r"替代|取代|代替|回退到|降级为", "replaces"),
    (r"演进|演变|升级为|发展为|扩展为|扩展", "extends"),
    (r"位于|坐落于|地处", "located_in"),
    (r"出生于|生于", "born_in"),
    (r"创立|创办|创建|成立", "founded"),
)
RELATIONS: tuple[str, ...] = tuple(dict.fromkeys(name for _, name in _EN_RELATIONS + _ZH_RELATIONS))
CO_OCCURS = "co_occurs"
TRIGGERS = "triggers"  # Stage N → Shortcut X
CONTAINS = "contains"  # also: a file or class → the function or class written after it
PART_OF = "part_of"  # also: a sub-section → its section
# Each mention co-occurs with the next few distinct names of its paragraph only: pairing all
# of a paragraph's names made co-occurrence nearly every relation of the graph.
COOCCURRENCE_WINDOW = 2

_EN_RELATION_RES = tuple((re.compile(p, re.IGNORECASE), name) for p, name in _EN_RELATIONS)
_ZH_RELATION_RES = tuple((re.compile(p), name) for p, name in _ZH_RELATIONS)
# jieba tags some relation verbs as nouns (融合/vn); they end a noun phrase instead.
_ZH_RELATION_WORDS = frozenset(w for p, _ in _ZH_RELATIONS for w in p.split("|") if re.fullmatch(r"[\u4e00-\u9fff]+", w))

# The special patterns: stages, shortcuts, layers and priorities have canonical names, so
# "阶段 5", "Stage 5" and "S5" are one node.
_STAGE = re.compile(r"\b(?:Stage|stage)\s*(\d{1,2})\b|阶段\s*(\d{1,2})|(?<![A-Za-z0-9])S(\d)(?![A-Za-z0-9])")
_SHORTCUT = re.compile(r"\b(?:Shortcut|shortcut)\s+([A-D])\b|短路\s*([A-D])(?![A-Za-z])")
_LAYER = re.compile(r"(?<![A-Za-z0-9])L([0-4])(?![A-Za-z0-9])(?:\s*[\u4e00-\u9fff]{0,4}层)?|\bLayer\s+([0-4])\b")
_PRIORITY = re.compile(r"(?<![A-Za-z0-9])P([0-3])(?![A-Za-z0-9])")
# Only searched for (is there an arrow?), so without the spaces around it, which a long gap of
# spaces would make it read again from each of them.
_ARROW = re.compile(r"→|->|=>|⇒|触发|triggers?")

# English noun phrases without a tagger: CamelCase, acronyms, names with digits or hyphens
# between letters, `code`, and runs of two to four Capitalised words.
_CODE = re.compile(r"`([A-Za-z_][\w./:-]{2,60}?)(?:\(\))?`")
_EN_NAME = re.compile(
    r"\b(?:[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+"  # CamelCase
    r"|[A-Z]{2,}[0-9]*s?"  # acronyms
    r"|[A-Za-z]+[0-9]+(?:[-.][A-Za-z0-9]+)*"  # versioned names: e5, GPT4, bge-m3
    r"|[A-Za-z][a-z0-9]*(?:-[A-Za-z0-9]+)+)\b"  # hyphenated: rank-bm25, e5-small
)
_SHORT_CODE = re.compile(r"[A-Za-z]\d{1,2}|v?\d[\d.]*")  # "S7", "v2.1": too short or bare to be a name
_TITLE_PHRASE = re.compile(r"\b[A-Z][a-z]{2,}(?: (?:[A-Z][a-z]{2,}|of|and)){1,3}\b")
_SENTENCE = re.compile(r"[^。！？!?；;\n]+(?:[。！？!?；;]|\n|$)")
_PARAGRAPHS = re.compile(r"\n\s*\n")

# Chinese part-of-speech tags that make noun phrases (jieba: n noun, nz other proper noun,
# vn verbal noun, j abbreviation, nt organisation, nr person, ns place, eng a Latin word).
_NOUN_TAGS = frozenset({"n", "nz", "vn", "j", "nt", "nr", "ns", "nrt", "eng"})
# The tags that say what a name is: a person, a place, an organisation.
_NAME_TAG_TYPES = {"nr": T.PERSON, "nrt": T.PERSON, "ns": T.PLACE, "nt": T.ORGANIZATION}
# Nouns too general to be an entity of a technical KB.
_GENERIC = frozenset(
    ["问题", "方式", "方法", "内容", "情况", "时候", "部分", "结果", "时", "空", "中", "后", "前", "里", "上", "下", "数", "个数", "次数", "能力", "效果", "作用", "过程", "目标", "原因", "场景", "功能", "特点", "作用", "方面", "类型", "时间", "信息", "用户", "系统", "例如", "比如", "示例", "一般", "问", "答", "说明", "注意", "默认", "要求", "步骤", "用途", "表", "列", "行", "值", "字段", "参数", "文件", "名称", "名字", "地方", "人", "东西", "事", "情形"]
)
_EN_GENERIC = frozenset({"The", "This", "That", "These", "When", "Each", "Every", "With", "For", "See", "Note", "If"})


@dataclass(frozen=True)
class Mention:
    surface: str  # as written
    key: str  # normalised name
    type: str
    start: int


@dataclass(frozen=True)
class Triple:
    source: str  # keys
    relation: str
    target: str


@dataclass
class Extraction:
    mentions: list[Mention] = field(default_factory=list)
    relations: list[Triple] = field(default_factory=list)  # explicit, weight 1.0
    co_occurrences: list[tuple[str, str]] = field(default_factory=list)  # weak, keys sorted


_KEY_SEPARATORS = re.compile(r"[\s\-_./·]+")


def normalise(name: str) -> str:
    """The key two spellings of one name share: NFKC, lower case, no spaces, hyphens or dots."""
    folded = unicodedata.normalize("NFKC", name).lower()
    return _KEY_SEPARATORS.sub("", folded)


# Latin words as a name is written: letters and digits, with . @ + / - inside ("Next.js",
# "rank-bm25", "recall@10"), so a name never matches half of a longer word.
_LATIN_WORD = re.compile(r"[A-Za-z0-9](?:[\w.@+/-]*[A-Za-z0-9+])?")


class TermDictionary:
    """Known names and their types; matched before any noun phrase, longest first.

    Lookups, not one regular expression: a KB's headings make thousands of names, and an
    alternation of them costs time per name at every position of every chunk. Latin names
    are looked up by runs of words, others (Chinese) by substrings at each position.
    """

    def __init__(self, terms: Mapping[str, str]) -> None:
        cleaned = {" ".join(name.split()): kind for name, kind in terms.items() if 2 <= len(name.strip()) <= 60}
        self.types = {normalise(name): kind for name, kind in cleaned.items()}
        self.names = {normalise(name): name for name in cleaned}
        # Short Latin names match case-sensitively: "KB" is a name, "kb" in a URL is not.
        self.exact = {n for n in cleaned if n.isascii() and len(n) < 5}
        self.folded = {n.lower() for n in cleaned if n.isascii() and len(n) >= 5}
        self.max_words = max((len(n.split()) for n in self.exact | self.folded), default=0)
        self.other = {n for n in cleaned if not n.isascii()}
        self.other_lengths = sorted({len(n) for n in self.other}, reverse=True)

    def find(self, text: str) -> Iterator[tuple[str, int]]:
        """(surface, start) of each name in text, longest first, without overlaps."""
        if self.max_words:
            yield from self._latin(text)
        if self.other:
            yield from self._other(text)

    def _latin(self, text: str) -> Iterator[tuple[str, int]]:
        words = [(m.start(), m.end()) for m in _LATIN_WORD.finditer(text)]
        i = 0
        while i < len(words):
            for n in range(min(self.max_words, len(words) - i), 0, -1):
                start, end = words[i][0], words[i + n - 1][1]
                surface = text[start:end]
                if n > 1 and any(not text[words[j][1] : words[j + 1][0]].isspace() for j in range(i, i + n - 1)):
                    continue
                phrase = " ".join(surface.split())
                if phrase in self.exact or (len(phrase) >= 5 and phrase.lower() in self.folded):
                    yield surface, start
                    i += n
                    break
            else:
                i += 1

    def _other(self, text: str) -> Iterator[tuple[str, int]]:
        position = 0
        while position < len(text):
            if text[position].isascii():
                position += 1
                continue
            for length in self.other_lengths:
                if text[position : position + length] in self.other:
                    yield text[position : position + length], position
                    position += length
                    break
            else:
                position += 1

    def type_of(self, key: str) -> str | None:
        return self.types.get(key)

    def name_of(self, key: str) -> str | None:
        return self.names.get(key)


_HEADING_NUMBER = re.compile(r"^\s*(?:[#>*\-]+\s*)?(?:第[一二三四五六七八九十\d]+[章节部分]|[\d.]+|[A-Z]\.|[一二三四五六七八九十]+、)\s*")


def dictionary_for(headings: Iterable[str], tags: Iterable[str]) -> TermDictionary:
    """The built-in terms plus a KB's own short headings and tags (type concept)."""
    terms: dict[str, str] = {}
    for heading in headings:
        name = _HEADING_NUMBER.sub("", heading).strip(" :：#")
        # A short heading names a thing ("Quality gate", "质量门控"); a long one is a sentence.
        short = len(name.split()) <= 4 if name.isascii() else len(name) <= 10
        if len(name) >= 3 and short and not re.search(r"[?？:：,，()（）`]", name) and name.lower() not in ENGLISH_STOP_WORDS:
            terms.setdefault(name, T.CONCEPT)
    for tag in tags:
        # Automatic tags include plain words ("path", "user"); only names are entities.
        # A relation verb ("调用", "包含") tagged as a keyword stays a verb: as a name it would
        # hide the relation it states.
        if 2 <= len(tag) <= 30 and not re.fullmatch(r"[a-z]+", tag) and tag not in _ZH_RELATION_WORDS:
            terms.setdefault(tag, T.CONCEPT)
    builtin = {normalise(name) for name in BUILTIN_TERMS}  # their spelling wins over a heading's
    terms = {name: kind for name, kind in terms.items() if normalise(name) not in builtin}
    terms.update(BUILTIN_TERMS)
    return TermDictionary(terms)


@cache
def _posseg():
    import jieba
    import jieba.posseg

    jieba.setLogLevel(60)
    return jieba.posseg


def _type_by_shape(name: str) -> str:
    if re.fullmatch(r"[A-Z]{2,}[0-9]*s?", name):
        return T.TECHNOLOGY
    if re.search(r"[0-9]", name) and re.search(r"[A-Za-z]", name):
        return T.MODEL if re.search(r"(?i)gpt|glm|qwen|bge|e5|llama|bert|m3", name) else T.TECHNOLOGY
    if name.isascii() and re.search(r"[a-z][A-Z]", name):
        return T.TECHNOLOGY
    return T.CONCEPT


def _special_mentions(text: str) -> list[Mention]:
    found = []
    for match in _STAGE.finditer(text):
        number = next(g for g in match.groups() if g)
        found.append(Mention(match.group(0), f"stage{number}", T.STAGE, match.start()))
    for match in _SHORTCUT.finditer(text):
        letter = next(g for g in match.groups() if g)
        found.append(Mention(match.group(0), f"shortcut{letter.lower()}", T.SHORTCUT, match.start()))
    for match in _LAYER.finditer(text):
        number = next(g for g in match.groups() if g)
        found.append(Mention(match.group(0).strip(), f"layer{number}", T.LAYER, match.start()))
    for match in _PRIORITY.finditer(text):
        found.append(Mention(match.group(0), f"p{match.group(1)}", T.PRIORITY, match.start()))
    return found


def _chinese_noun_phrases(text: str, offset: int) -> list[Mention]:
    """Runs of one to three nouns ("质量" + "门控" → 质量门控), 2–8 characters, not generic."""
    found: list[Mention] = []
    run: list[tuple[str, int, str]] = []
    position = offset

    def flush() -> None:
        if run:
            words = [w for w, _, _ in run if w not in _GENERIC] if len(run) == 1 else [w for w, _, _ in run]
            phrase = "".join(words)
            if 2 <= len(phrase) <= 8 and phrase not in _GENERIC:
                # The last noun heads the phrase: "北京大学" (nt) is an organisation.
                kind = _NAME_TAG_TYPES.get(run[-1][2], T.CONCEPT)
                found.append(Mention(phrase, normalise(phrase), kind, run[0][1]))
            run.clear()

    for word, flag in _posseg().lcut(text, HMM=False):
        cjk = "\u4e00" <= word[0] <= "\u9fff"
        if cjk and flag in _NOUN_TAGS and word not in _ZH_RELATION_WORDS:
            if len(run) == 3:
                flush()
            run.append((word, position, flag))
        else:
            flush()
        position += len(word)
    flush()
    return found


def _english_names(text: str) -> list[Mention]:
    found = []
    for match in _CODE.finditer(text):
        name = match.group(1)
        found.append(Mention(name, normalise(name), T.TOOL if "." in name or "/" in name else T.CONCEPT, match.start(1)))
    for match in _EN_NAME.finditer(text):
        name = match.group(0)
        if len(name) >= 2 and not name.isdigit() and not _SHORT_CODE.fullmatch(name):
            found.append(Mention(name, normalise(name), _type_by_shape(name), match.start()))
    for match in _TITLE_PHRASE.finditer(text):
        words = match.group(0).split()
        while words and (words[0] in _EN_GENERIC or words[-1] in ("of", "and")):
            words = words[1:] if words[0] in _EN_GENERIC else words[:-1]
        if len(words) >= 2:
            name = " ".join(words)
            found.append(Mention(name, normalise(name), T.CONCEPT, match.start() + match.group(0).index(words[0])))
    return found


def find_mentions(text: str, dictionary: TermDictionary, structure: StructuralFacts | None = None) -> list[Mention]:
    """Every entity mention of text, in order, without overlaps (dictionary, structure and
    patterns win over noun phrases). `structure`: the text's headings, table rows and
    key-value lines, when the caller read them."""
    strong = [
        Mention(surface, normalise(surface), dictionary.type_of(normalise(surface)) or T.CONCEPT, start)
        for surface, start in dictionary.find(text)
    ] + _special_mentions(text)
    strong += [Mention(m.surface, normalise(m.surface), m.type, m.start) for m in (structure.mentions if structure else ())]
    strong += [Mention(m.surface, normalise(m.surface), m.type, m.start) for m in code_identifiers(text)]
    weak = _english_names(text)
    if not text.isascii():
        for run in re.finditer(r"[\u4e00-\u9fff]+", text):
            weak.extend(_chinese_noun_phrases(run.group(0), run.start()))
    chosen: list[Mention] = []
    # The characters taken so far, not a list of spans each new mention is compared with: that
    # list grows with the text, and a text of many mentions would cost their number squared.
    # (A surface is never empty, so sharing a character is overlapping.)
    taken = bytearray(len(text))
    for mention in strong + weak:
        start, end = mention.start, mention.start + len(mention.surface)
        if mention.key and 0 <= start and end <= len(text) and taken.find(1, start, end) == -1:
            kind = dictionary.type_of(mention.key) or mention.type
            chosen.append(Mention(mention.surface, mention.key, kind, mention.start))
            taken[start:end] = b"\x01" * (end - start)
    return sorted(chosen, key=lambda m: m.start)


def _relation_between(gap: str) -> str | None:
    """The relation a short stretch of text between two mentions states, if any."""
    if len(gap) > 40 or re.search(r"[，,、]\s*\S+\s*[，,、]", gap):
        return None
    for pattern, name in _ZH_RELATION_RES if not gap.isascii() else _EN_RELATION_RES:
        if pattern.search(gap):
            return name
    if gap.isascii():
        return None
    for pattern, name in _EN_RELATION_RES:
        if pattern.search(gap):
            return name
    return None


_CODE_CONTAINERS = frozenset({T.FILE, T.MODULE, T.CLASS})
_CODE_MEMBERS = frozenset({T.CLASS, T.FUNCTION})
_MEMBER_GAP = re.compile(r"\s*(?:→|->|::|\.|#|中的|里的|的)?\s*`?")


def _pair_relation(left: Mention, right: Mention, gap: str) -> str | None:
    """The relation two neighbouring mentions of a sentence state, by their types or the words between."""
    if left.type == T.STAGE and right.type == T.SHORTCUT and _ARROW.search(gap):
        return TRIGGERS
    # "`graph_builder.py` → `_extract()`", "EntityDisambiguator.disambiguate()": the file or
    # class holds the function written right after it.
    if left.type in _CODE_CONTAINERS and right.type in _CODE_MEMBERS and len(gap) <= 6 and _MEMBER_GAP.fullmatch(gap.strip("`")):
        return CONTAINS
    return _relation_between(gap)


def extract(text: str, dictionary: TermDictionary, *, window: int = COOCCURRENCE_WINDOW) -> Extraction:
    """Mentions, explicit relations and co-occurrences of one chunk of text."""
    result = Extraction()
    seen: set[Triple] = set()

    def add(triple: Triple) -> None:
        if triple.source != triple.target and triple not in seen:
            seen.add(triple)
            result.relations.append(triple)

    for paragraph in _PARAGRAPHS.split(text):
        structure = structural_facts(paragraph)
        mentions = find_mentions(paragraph, dictionary, structure)
        result.mentions.extend(mentions)
        # A structural name whose place a dictionary term or a pattern took ("L1 接入层" → layer1)
        # is known by the name chosen there.
        key_at = {m.start: m.key for m in mentions}
        keys = set(key_at.values())

        def key_of(named) -> str | None:
            key = key_at.get(named.start) or normalise(named.surface)
            return key if key in keys else None

        for subject, relation, value in structure.relations:
            source, target = key_of(subject), key_of(value)
            if source and target:
                add(Triple(source, relation, target))
        starts = [m.start for m in mentions]  # in order: find_mentions sorts them
        for sentence in _SENTENCE.finditer(paragraph):
            inside = mentions[bisect_left(starts, sentence.start()) : bisect_left(starts, sentence.end())]
            for left, right in itertools.pairwise(inside):
                if left.key == right.key:
                    continue
                relation = _pair_relation(left, right, paragraph[left.start + len(left.surface) : right.start])
                if relation:
                    add(Triple(left.key, relation, right.key))
        result.co_occurrences.extend(_neighbour_pairs(mentions, window))
    return result


def _neighbour_pairs(mentions: list[Mention], window: int) -> Iterator[tuple[str, str]]:
    """Each distinct name with the next `window` distinct names of the paragraph (keys sorted)."""
    order = list(dict.fromkeys(m.key for m in mentions))
    for i, key in enumerate(order):
        for other in order[i + 1 : i + 1 + window]:
            yield (key, other) if key < other else (other, key)
