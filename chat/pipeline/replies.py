"""The answers the shortcuts give without a model: clarifying questions, system replies, no evidence."""

from __future__ import annotations

from .intent import Intent, IntentResult
from .stages import NEVER_MENTIONED
from .state import language_of

SYSTEM_REPLIES = {
    "greeting": {
        "en": "Hello! Ask me anything about the documents of your knowledge base; every answer cites its sources as [n].",
        "zh": "你好！可以问我知识库文档里的任何问题，每个回答都会用 [n] 标出出处。",
    },
    "help": {
        "en": "Pick a knowledge base and ask a question in English or Chinese. I search its documents, "
        "answer from what I find and mark each sentence's source as [n]; click a number to see the evidence. "
        "Follow-up questions can refer to earlier ones (\"what about …?\").",
        "zh": "选择一个知识库，用中文或英文提问。我会检索其中的文档，根据找到的内容回答，并用 [n] 标出每句话的出处；"
        "点击编号即可查看证据。追问时可以直接说“那……呢？”。",
    },
    "about": {
        "en": "I am the assistant of Agentic RAG on Django: I answer from the documents of the knowledge base you "
        "choose and cite them, and I say so when they do not answer a question.",
        "zh": "我是 Agentic RAG on Django 的助手：根据你选择的知识库文档回答并标注出处；文档里没有答案时我会直说。",
    },
    "thanks": {"en": "You're welcome! Anything else?", "zh": "不客气！还有其他问题吗？"},
    "ack": {"en": "Glad that helps. Ask me anything else about the documents.", "zh": "好的，还有问题随时问我。"},
}

_INTENT_LABELS = {
    "KB": {"en": "search the knowledge base", "zh": "在知识库中查找"},
    "SYSTEM": {"en": "tell you about this assistant", "zh": "介绍这个助手"},
    "TOOL": {"en": "use the {tool} tool", "zh": "使用 {tool} 工具"},
}


def system_reply(message: str, intent: IntentResult) -> str:
    """A direct answer to a greeting, help request, thanks or question about the assistant."""
    language = language_of(message)
    topic = next((i.topic for i in intent.intents if i.topic in SYSTEM_REPLIES), "help")
    return SYSTEM_REPLIES[topic][language]


def clarifying_question(message: str, candidates: tuple[Intent, ...]) -> str:
    """Ask what the user means: name the close candidates, or ask for a subject."""
    language = language_of(message)
    if len(candidates) >= 2:
        first, second = (_label(c, language) for c in candidates[:2])
        if language == "zh":
            return f"我不太确定你的意思：你是想让我{first}，还是{second}？"
        return f"I'm not sure what you mean: should I {first}, or {second}?"
    if language == "zh":
        return "能再具体一点吗？请告诉我你想了解的功能、文档或概念，例如“混合检索是怎么工作的？”"
    return (
        "Could you be more specific? Tell me which feature, document or concept you mean, "
        'for example "How does hybrid search work?"'
    )


def no_evidence_reply(message: str, kb_name: str, reason: str) -> str:
    """Say that nothing answers the question, and why (shortcut C)."""
    language = language_of(message)
    if not kb_name:
        # Offline there is no model to answer a general question, and nothing to quote.
        if language == "zh":
            return ("这个问题不涉及你的任何知识库，也没有适用的工具；未配置大模型时回答只能摘自文档，"
                    "所以无法离线回答。请选择一个知识库，或配置大模型（LLM_PROVIDERS）后再问。")
        return ("This question is not about any of your knowledge bases and no tool applies. Without a "
                "language model configured, answers can only be quoted from documents, so it cannot be "
                "answered offline. Pick a knowledge base, or configure a model (LLM_PROVIDERS) and ask again.")
    if language == "zh":
        return f"在知识库「{kb_name}」中没有找到能回答这个问题的内容（{_reason_zh(reason)}）。"
    return f"I found nothing in the knowledge base \u201c{kb_name}\u201d that answers this ({reason or 'no match'})."


_REASONS_ZH = {
    "the knowledge base has no ready documents": "知识库里还没有可用的文档",
    "the query has no words to search for": "问题里没有可检索的词",
    "nothing in the knowledge base matches the query": "没有与问题匹配的内容",
    "no passage passed the quality gate": "没有段落通过质量门槛",
    "the search failed": "检索出错",
    "the search ran out of time": "检索超时",
    "no passage holds enough of the question's words": "找到的段落与问题关系太弱",
}


def _reason_zh(reason: str) -> str:
    if reason.startswith(NEVER_MENTIONED):
        return f"知识库里没有提到 {reason.removeprefix(NEVER_MENTIONED).strip()}"
    return _REASONS_ZH.get(reason, reason or "没有匹配的内容")


def _label(intent: Intent, language: str) -> str:
    return _INTENT_LABELS[intent.name][language].format(tool=intent.tool)
