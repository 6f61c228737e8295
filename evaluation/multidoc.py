"""A multi-document question set over SQuAD-layout articles (CMRC2018): bridge questions.

Article A mentions article B by its title (A's text names "诺丁汉郡", which is B's title, and
no other article's). A question of B that names B's title has that name hidden behind a pointer
through A: "诺丁汉郡隶属于哪个国家？" becomes "林肯郡中提到的那个条目，它隶属于哪个国家？".
Both articles are relevant: A to know which entry is meant, B for the answer. This is how HotpotQA builds its bridge
questions; here the bridge entity is taken from the data's own titles, so nobody wrote the
text or chose the pairs. Each article is one passage ("title\\ncontext"); articles linked to
no other stay in the corpus as distractors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .datasets import Dataset, DatasetError, Passage, Question

MIN_TITLE_CHARS = 3  # shorter titles ("长城") are common words in other articles' text
QUESTIONS_PER_PAIR = 2


@dataclass(frozen=True)
class Article:
    id: str
    title: str
    text: str
    questions: tuple[str, ...]


def read_articles(paths: Iterable[Path]) -> list[Article]:
    """The articles of SQuAD-layout files: title, the paragraphs' text, the questions."""
    articles: list[Article] = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))["data"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DatasetError(f"{path}: not a SQuAD-layout file ({error})") from None
        for n, item in enumerate(data):
            paragraphs = item.get("paragraphs") or []
            text = "\n".join(p.get("context", "").strip() for p in paragraphs)
            questions = tuple(q["question"].strip() for p in paragraphs for q in p.get("qas", []) if q.get("question"))
            title = str(item.get("title") or "").strip()
            if title and text:
                articles.append(Article(f"{Path(path).stem}-{n}", title, text, questions))
    return articles


def bridge_pairs(articles: list[Article]) -> list[tuple[Article, Article]]:
    """(A, B) where A's text names B's title and no other article's, B's title unique and long
    enough to be a name."""
    by_title: dict[str, list[Article]] = {}
    for article in articles:
        by_title.setdefault(article.title, []).append(article)
    titles = sorted((t for t, found in by_title.items() if len(found) == 1 and len(t) >= MIN_TITLE_CHARS), key=len, reverse=True)
    pairs = []
    for a in articles:
        # Title lookups, not one pattern of all titles: the text is read once per title length.
        lengths = sorted({len(t) for t in titles}, reverse=True)
        names = set(titles)
        found = {a.text[i : i + n] for n in lengths for i in range(len(a.text) - n + 1) if a.text[i : i + n] in names}
        linked = [by_title[t][0] for t in sorted(found) if by_title[t][0].id != a.id]
        # "The entry A mentions" must name one entry: an article naming several has no answer.
        if len(linked) == 1:
            pairs.append((a, linked[0]))
    return pairs


def bridge_question(a: Article, b: Article, question: str) -> str:
    """B's question with B's name replaced by a pointer through A."""
    if b.title in question:
        return f"{a.title}中提到的那个条目，" + question.replace(b.title, "它", 1).replace(b.title, "它")
    return f"{a.title}中提到的那个条目：{question}"


def bridge_dataset(paths: Iterable[Path], *, distractors: int | None = None, name: str = "cmrc-bridge") -> Dataset:
    """Passages (the linked articles, then up to `distractors` others) and the bridge questions."""
    articles = read_articles(paths)
    pairs = bridge_pairs(articles)
    linked = {article.id for pair in pairs for article in pair}
    others = [article for article in articles if article.id not in linked]
    kept = [article for article in articles if article.id in linked] + others[: len(others) if distractors is None else distractors]
    passages = [Passage(article.id, f"{article.id}.txt", f"{article.title}\n{article.text}") for article in kept]
    questions = []
    for a, b in pairs:
        # B's own questions that name B come first: hiding the name is what makes them bridges.
        chosen = sorted(b.questions, key=lambda q: b.title not in q)[:QUESTIONS_PER_PAIR]
        for n, question in enumerate(chosen):
            questions.append(Question(f"{a.id}>{b.id}-{n}", bridge_question(a, b, question), {a.id: 1, b.id: 1}))
    return Dataset(name, "squad", ",".join(str(p) for p in paths), passages, questions)
