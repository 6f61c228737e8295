"""Section edits made by rules, for when no language model is configured.

Rules cannot reword a text, so they only do what they can do honestly: condense (keep the
sentences that carry most of the section's terms, in their order), expand (add sentences
quoted from related passages, each with its source), and tidy (spacing, Chinese
punctuation, repeated sentences). A rewrite in other words is refused with a message that
says what the rules can do instead. Lists, tables, headings and code are kept as written.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agentic_rag.llm.units import has_cjk
from knowledge.analysis import analyze
from knowledge.chunking import split_sentences

# Shares of the section's characters a condensed version keeps, one per regeneration.
CONDENSE_RATIOS = (0.6, 0.45, 0.75)
EXPAND_SENTENCES = 2
_STRUCTURED = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|\||#|>|```|~~~|    |---\s*$)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CJK = "\u3400-\u4dbf\u4e00-\u9fff"
_CJK_PUNCTUATION = {",": "，", ";": "；", ":": "：", "?": "？", "!": "！"}

MESSAGES = {
    "en": {
        "condense": "Offline (no language model): condensed by rules, keeping {kept} of {total} sentences in their order; nothing was reworded.",
        "expand": "Offline (no language model): added {count} sentence(s) quoted from related passages, each with its source; nothing was reworded.",
        "tidy": "Offline (no language model): tidied spacing, punctuation and repeated sentences; nothing was reworded.",
        "refuse_reword": "Rewording a section needs a language model, and none is configured. Offline I can condense the section (\"condense\") or expand it with sentences quoted from related documents (\"expand\").",
        "no_references": "No related passage passed the quality gate, so there is nothing to expand the section with offline.",
        "too_short": "The section has too few sentences to condense by rules.",
        "only_structure": "The section holds only code, tables, lists or front matter, which rules keep exactly as written; there is no prose to condense or tidy.",
        "no_other": "Offline rules have no further version of this edit; configure a language model for more.",
        "no_change": "The section is already tidy; rewording it needs a language model, and none is configured.",
    },
    "zh": {
        "condense": "离线（未使用语言模型）：按规则精简，保留了 {total} 句中的 {kept} 句，顺序不变，未改写措辞。",
        "expand": "离线（未使用语言模型）：从相关资料中引用了 {count} 句补充到本节，并注明出处，未改写措辞。",
        "tidy": "离线（未使用语言模型）：整理了空白、标点和重复的句子，未改写措辞。",
        "refuse_reword": "改写措辞需要语言模型，当前未配置。离线时可以“精简”本节，或用相关资料中的原句“扩写”本节。",
        "no_references": "没有相关资料通过质量门控，离线时无法扩写本节。",
        "too_short": "本节句子太少，无法按规则精简。",
        "only_structure": "本节只有代码、表格、列表或前置元数据，规则会原样保留；没有可以精简或整理的正文。",
        "no_other": "离线规则没有这个修改的其他版本；配置语言模型后可以生成更多版本。",
        "no_change": "本节已经很整洁；改写措辞需要语言模型，当前未配置。",
    },
}


@dataclass(frozen=True)
class OfflineEdit:
    content: str  # the proposed section body ("" when refused)
    summary: str  # what was done, or why nothing was
    refused: bool = False
    warnings: tuple[str, ...] = ()


def propose(
    operation: str,
    content: str,
    references: Sequence[tuple[str, str]],
    *,
    attempt: int = 0,
    avoid: str = "",
    language: str = "en",
) -> OfflineEdit:
    """The rules' edit for operation; `avoid` is a previous proposal the result must differ from."""
    text = MESSAGES.get(language, MESSAGES["en"])
    if operation == "condense":
        edits = [condense(content, CONDENSE_RATIOS[(attempt + i) % len(CONDENSE_RATIOS)], text) for i in range(len(CONDENSE_RATIOS))]
    elif operation == "expand":
        edits = [expand(content, references, skip=(attempt + i) * EXPAND_SENTENCES, text=text) for i in range(3)]
    elif operation == "polish":
        edits = [tidy(content, text)]
    else:
        return OfflineEdit("", text["refuse_reword"], refused=True)
    usable = [edit for edit in edits if not edit.refused]
    if not usable:
        return edits[0]
    different = [edit for edit in usable if edit.content.strip() not in (avoid.strip(), content.strip())]
    if different:
        return different[0]
    return OfflineEdit("", text["no_other"] if avoid else text["no_change"], refused=True)


def condense(content: str, ratio: float, text: dict[str, str]) -> OfflineEdit:
    """Keep the prose sentences richest in the section's own terms, up to ratio of its length."""
    blocks = _blocks(content)
    sentences = [(b, i, s) for b, block in enumerate(blocks) if not _is_structured(block)
                 for i, s in enumerate(split_sentences(block)) if s.strip()]
    if not sentences:
        return OfflineEdit("", text["only_structure"], refused=True)
    if len(sentences) < 3:
        return OfflineEdit("", text["too_short"], refused=True)
    weights = Counter(term for _, _, s in sentences for term in set(analyze(s)))
    budget = ratio * sum(len(s) for _, _, s in sentences)
    # The first sentence of a section usually states its subject: keep it.
    order = sorted(range(len(sentences)), key=lambda k: (k != 0, -_density(sentences[k][2], weights)))
    kept: set[int] = set()
    used = 0
    for k in order:
        if used + len(sentences[k][2]) > budget and kept:
            continue
        kept.add(k)
        used += len(sentences[k][2])
    by_block: dict[int, list[str]] = {}
    for k in sorted(kept):
        block, _, sentence = sentences[k]
        by_block.setdefault(block, []).append(sentence.strip())
    result = [block if _is_structured(block) else _join(by_block.get(b, [])) for b, block in enumerate(blocks)]
    content_out = "\n\n".join(part for part in result if part.strip())
    summary = text["condense"].format(kept=len(kept), total=len(sentences))
    return OfflineEdit(content_out, summary)


def expand(content: str, references: Sequence[tuple[str, str]], *, skip: int, text: dict[str, str]) -> OfflineEdit:
    """Append sentences of the related passages that the section does not hold, with their source."""
    if not references:
        return OfflineEdit("", text["no_references"], refused=True)
    section_terms = set(analyze(content))
    present = {_normalised(s) for s in split_sentences(content)}
    candidates: list[tuple[float, str, str]] = []
    for passage, source in references:
        for sentence in split_sentences(passage):
            terms = set(analyze(sentence))
            if len(sentence.strip()) < 20 or not terms or _normalised(sentence) in present or _STRUCTURED.match(sentence):
                continue
            overlap = len(terms & section_terms) / math.sqrt(len(terms))
            new = len(terms - section_terms) / len(terms)
            candidates.append((overlap * (0.5 + new), sentence.strip(), source))
    candidates.sort(key=lambda item: -item[0])
    chosen = candidates[skip : skip + EXPAND_SENTENCES]
    if not chosen:
        return OfflineEdit("", text["no_references"] if not candidates else text["no_other"], refused=True)
    additions = "\n\n".join(f"{sentence}（{source}）" if has_cjk(sentence) else f"{sentence} ({source})" for _, sentence, source in chosen)
    return OfflineEdit(f"{content.rstrip()}\n\n{additions}", text["expand"].format(count=len(chosen)))


def tidy(content: str, text: dict[str, str]) -> OfflineEdit:
    """Spacing, half-width punctuation between Chinese characters, and repeated sentences."""
    blocks = []
    if all(_is_structured(block) for block in _blocks(content)):
        return OfflineEdit("", text["only_structure"], refused=True)
    for block in _blocks(content):
        if _is_structured(block):
            blocks.append(block)
            continue
        block = re.sub(r"[ \t]{2,}", " ", block)
        block = re.sub(rf"(?<=[{_CJK}])\s*([,;:?!])\s*", lambda m: _CJK_PUNCTUATION[m.group(1)], block)
        block = re.sub(rf"(?<=[{_CJK}]) +(?=[{_CJK}])", "", block)
        seen: set[str] = set()
        sentences = []
        for sentence in split_sentences(block):
            key = _normalised(sentence)
            if key and key in seen:
                continue
            seen.add(key)
            sentences.append(sentence.strip())
        blocks.append(_join(sentences))
    tidied = "\n\n".join(blocks)
    if tidied.strip() == content.strip():
        return OfflineEdit("", text["no_change"], refused=True)
    return OfflineEdit(tidied, text["tidy"])


def _blocks(content: str) -> list[str]:
    """The blank-line separated blocks of a section; fenced code and front matter are one
    block each, blank lines inside them included, so no rule ever takes them for prose."""
    blocks: list[str] = []
    current: list[str] = []
    closing = ""  # the line that ends the open fence or front matter
    for number, line in enumerate(content.strip("\n").splitlines()):
        if closing:
            current.append(line)
            if line.strip().startswith(closing) and not line.strip().strip(closing[0]):
                closing = ""
        elif fence := _FENCE.match(line):
            closing = fence[1]
            current.append(line)
        elif number == 0 and line.strip() == "---":
            closing = "---"
            current.append(line)
        elif line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def _is_structured(block: str) -> bool:
    return any(_STRUCTURED.match(line) for line in block.splitlines())


def _density(sentence: str, weights: Counter[str]) -> float:
    terms = analyze(sentence)
    return sum(weights[t] for t in set(terms)) / math.sqrt(len(terms) + 1)


def _join(sentences: Sequence[str]) -> str:
    joined = ""
    for sentence in sentences:
        separator = "" if not joined or has_cjk(joined[-1]) or has_cjk(sentence[:1]) else " "
        joined += separator + sentence
    return joined


def _normalised(sentence: str) -> str:
    return re.sub(r"\W+", "", sentence.lower())
