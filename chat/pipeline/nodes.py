"""The graph's node handlers: each calls its stage and returns what it found as an Outcome.

The runner applies an Outcome's `found` values to the ChatRun. Handlers of stages that run
side by side (rewrite, intent) only read the run, so one cut off at its budget leaves no
trace. A handler that raises is replaced by its degrade function: rewrite keeps the
original query, intent falls back to the default KB intent, search to no evidence.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from django.conf import settings

from agentic_rag.db_threads import DatabaseThreadPool
from agentic_rag.llm import LLMConfig, ModelRouter, build_llm
from agentic_rag.llm.extractive import DISCLAIMER, FAILURE_LABELS
from chat import clarifier, memory
from chat.clarifier_lookups import ReadableLibrary
from chat.facts import RecalledFact, fact_evidence, recall_facts
from chat.models import Shortcut, TraceStatus
from chat.workers import TOOL_CALLING_AGENTS, RagRunSpec, plan_for, run_plan
from knowledge.analysis import analyze
from knowledge.fusion import expand_query
from knowledge.gate import gate_trace
from knowledge.lexicon import translate_question
from knowledge.models import AnswerMode
from knowledge.search import kb_mentions

from . import stages
from .compound import part_heading, part_not_found, split_question
from .intent import DEFAULT_INTENT, classify_intent
from .options import StageStatus
from .prompt import assemble_prompt
from .replies import clarifying_question, no_evidence_reply, system_reply
from .rewrite import rewrite_query, unchanged
from .run import ChatRun, Outcome
from .state import EvidenceItem, Turn
from .store import load_turns
from .timeouts import may_leave_thread, node_timeout_s, wait_for
from .tools import AgentTools, ToolContext, ToolResult, run_calls

logger = logging.getLogger("chat.pipeline")

POOL = DatabaseThreadPool(max_workers=8, thread_name_prefix="chat-stage")
HISTORY_TURN_CHARS = 1000
SEARCH_FAILED = "the search failed"
SEARCH_TIMED_OUT = "the search ran out of time"
ANSWER_TIMED_OUT = "the answer ran over its time; it ends where the model was cut off"
STOPPED_MID_ANSWER = "the language model stopped mid-answer; the rest is quoted from the sources"


def _memory(run: ChatRun) -> Outcome:
    summary = memory.summary_of(run.conversation)
    turns = load_turns(run.conversation, run.options.history_turns, summary.until_message_id if summary else 0)
    history = stages.recent_turns(turns, run.options.history_turns)
    recalled = _recall(run)
    block = memory.memory_block(summary.text if summary else "", recalled)
    summarised = f", {summary.turns} summarised" if summary else ""
    recalled_note = f", {len(recalled)} recalled" if recalled else ""
    facts = _recall_facts(run)
    facts_note = f", {len(facts)} stated facts" if facts else ""
    detail = f"{len(history) // 2} earlier turns{summarised}{recalled_note}{facts_note}"
    return Outcome(StageStatus.DONE, detail, found={"history": history, "memory": block, "facts": facts})


def _recall(run: ChatRun) -> list[memory.Recalled]:
    """The user's past exchanges like this question; recall is a bonus, so failing is empty."""
    if not run.options.recall_memory:
        return []
    try:
        return memory.memory_retrieve(
            run.conversation.user, run.message, settings.CHAT_MEMORY_K, exclude_conversation=run.conversation.pk
        )
    except Exception as error:
        logger.warning("episodic recall failed, continuing without it: %s", error, exc_info=True)
        return []


def _recall_facts(run: ChatRun) -> tuple[RecalledFact, ...]:
    """The facts the user stated earlier that this question is about (semantic memory); failing is none."""
    if not run.options.recall_memory:
        return ()
    try:
        return tuple(recall_facts(run.conversation.user, run.message))
    except Exception as error:
        logger.warning("recalling stated facts failed, continuing without them: %s", error, exc_info=True)
        return ()


def _rewrite(run: ChatRun) -> Outcome:
    c = run.collaborators
    rewrite = rewrite_query(
        run.message, run.history, llm=c.llm, cache=c.cache,
        turns=run.options.rewrite_history_turns, ttl=settings.CHAT_REWRITE_CACHE_TTL, memory=run.memory,
    )
    return Outcome(StageStatus.DONE, f"{rewrite.method}: {' | '.join(rewrite.queries)}", found={"rewrite": rewrite})


def _intent(run: ChatRun) -> Outcome:
    c = run.collaborators
    intent = classify_intent(
        run.message, run.history, llm=c.llm, cache=c.cache,
        tools=c.tools.available(), ttl=settings.CHAT_INTENT_CACHE_TTL,
    )
    top = intent.top
    detail = f"{top.name}{':' + top.tool if top.tool else ''} {top.confidence:.2f} ({intent.method})"
    return Outcome(StageStatus.DONE, detail, found={"intent": intent}, events=(("intent", intent.as_event()),))


def _guide(run: ChatRun) -> Outcome:
    asked = _clarification(run)
    if asked is not None:
        return Outcome(StageStatus.SHORTCUT, f"clarify ({asked['kind']}): {asked['reason']}", Shortcut.A,
                       found={"reply": asked["question"], "clarification": asked}, events=(("clarify", asked),))
    options = run.options
    ambiguity = stages.find_ambiguity(
        run.intent,
        min_confidence=options.ambiguity_min_confidence,
        min_gap=options.ambiguity_min_gap,
        floor=options.min_confidence_score,
    )
    if ambiguity is None:
        return Outcome(StageStatus.DONE, "the intent is clear")
    reply = clarifying_question(run.message, ambiguity.candidates)
    return Outcome(StageStatus.SHORTCUT, ambiguity.reason, Shortcut.A, found={"reply": reply})


def _clarification(run: ChatRun) -> dict[str, Any] | None:
    """The Clarifier's question (the "clarify" event) for an agent that asks, when the question is ambiguous."""
    routed = run.admitted.route
    agent_type = routed.agent_type if routed and run.options.agent_type == "auto" else run.options.agent_type
    if (agent_type not in settings.CHAT_CLARIFY_AGENTS or run.options.clarified
            or run.intent.is_all_system or not run.intent.wants_kb):
        return None
    kb = clarifier.KbRef(run.kb.slug, run.kb.name) if run.kb else None
    asked = clarifier.Asked(run.message, bool(run.history), kb, bool(run.options.kb_slug),
                            routed.ranked if routed else ())
    found = clarifier.clarify(asked, ReadableLibrary(run.conversation.user),
                              min_score=settings.KB_ROUTE_MIN_SCORE, max_gap=settings.CHAT_CLARIFY_KB_GAP)
    return {**found.as_event(), "agent_type": agent_type} if found else None


def _system(run: ChatRun) -> Outcome:
    if not run.intent.is_all_system:
        return Outcome(StageStatus.DONE, "not a system message")
    reply = system_reply(run.message, run.intent)
    return Outcome(StageStatus.SHORTCUT, "every intent is SYSTEM", Shortcut.B, found={"reply": reply})


def _retrieve(run: ChatRun) -> Outcome:
    c = run.collaborators
    asked = compound_parts(run) if run.kb is not None else []
    plan = _plan(run, asked)
    # An agent that calls tools itself (ReAct) decides which; the pipeline does not call them too.
    agent_calls_tools = any(spec.agent_type in TOOL_CALLING_AGENTS for spec in plan)
    calls = c.tools.plan(run.message, run.intent.tools) if run.intent.tools and not agent_calls_tools else []
    ctx = contextvars.copy_context()
    pending = POOL.submit(ctx.run, _call_tools, run, calls) if calls else None
    search, late = _search_in_time(run, plan) if plan and (run.intent.wants_kb or not calls) else (stages.KbSearch(), ())
    tool_results = [*(pending.result() if pending else []), *search.tool_results]
    reranked = run.kb is not None and stages.retrieval_params(run.kb, run.options).reranks
    limit = stages.evidence_limit(run.options, rerank=reranked)
    # A compound question's parts are answered one by one (an agent's own sub-questions may
    # stand for them); another question that an agent split stays one answer.
    gated = _gate_parts(run, search, limit) if asked and len(search.parts) >= 2 else []
    if gated:
        # Each part's evidence, once each, in part order: every part's passages reach the prompt.
        search.references = list({c.chunk_id: c for _, references, _ in gated for c in references}.values())
        if not search.references:
            search.reason = next((reason for _, _, reason in gated if reason), search.reason or stages.NO_MATCH)
        limit = max(limit, len(search.references))
    else:
        _gate_weak_evidence(run, search)
    evidence = stages.number_evidence(search.references, tool_results, limit=limit, url_for=_url_for(run))
    evidence += fact_evidence(run.facts, len(evidence) + 1)  # what the user told us, cited as MEMORY
    found: dict[str, Any] = {"tool_results": tool_results, "evidence": evidence,
                             "incomplete": "; ".join(search.incomplete), "search_warnings": search.warnings}
    events = (*late, *_evidence_events(tool_results, evidence, search.reason))
    if gated:
        parts = _numbered_parts(gated, evidence)
        part_events = [part.as_event(n, evidence) for n, part in enumerate(parts, 1)]
        found |= {"parts": parts, "agent_steps": [*run.agent_steps, *({"type": "part", **e} for e in part_events)]}
        events += tuple(("part", event) for event in part_events)
    status = StageStatus.FAILED if search.reason in (SEARCH_FAILED, SEARCH_TIMED_OUT) else StageStatus.DONE
    if run.kb is None and not tool_results and getattr(c.llm, "has_model", False):
        # A general question (no KB routed, no tool): the model answers from general knowledge.
        return Outcome(StageStatus.DONE, "general question: the model answers without sources", found=found, events=events)
    if not evidence and not tool_results:
        found["reply"] = no_evidence_reply(run.message, run.kb.name if run.kb else "", search.reason)
        shortcut_status = StageStatus.FAILED if status == StageStatus.FAILED else StageStatus.SHORTCUT
        return Outcome(shortcut_status, search.reason or "no evidence", Shortcut.C, found=found, events=events)
    degraded = " (rerank failed: original order)" if search.is_rerank_degraded else ""
    detail = f"{len(search.references[:limit])} KB, {len(tool_results)} tool{degraded}"
    return Outcome(status, detail, found=found, events=events)


def _gate_parts(run: ChatRun, search: stages.KbSearch, limit: int) -> list[tuple[Any, list, str]]:
    """Each part of a compound question through the evidence gate on its own: (part, its
    references, why none). A part's search already passed the retrieval's quality gate."""
    gated = []
    for part in search.parts:
        merged = stages.collect_search(part.results)
        references, reason = stages.gate_part(
            part.question, merged.references, minimum=run.options.min_evidence_coverage, limit=limit,
            tokenize=analyze, expand=expand_query, titles=stages.document_titles(merged.references[:limit]),
            mentions=stages.mentioned(merged.references, partial(kb_mentions, run.kb)),
        )
        if not references:
            run.recorder.add("kb.part_gate", "retrieval", start_ms=run.recorder.elapsed_ms(), ms=0.0,
                             input=part.question, output=reason or merged.reason or stages.NO_MATCH, status="ok")
        gated.append((part, references, reason or ("" if references else merged.reason or stages.NO_MATCH)))
    return gated


def _numbered_parts(gated: list[tuple[Any, list, str]], evidence: tuple[EvidenceItem, ...]) -> tuple[stages.PartEvidence, ...]:
    """The parts with the numbers their references got in the evidence list."""
    number_of = {item.chunk_id: item.n for item in evidence if item.source == "KB" and item.chunk_id}
    number_of |= {item.text: item.n for item in evidence if item.source == "WEB"}
    parts = []
    for part, references, reason in gated:
        numbers = [number_of.get(c.chunk_id) or number_of.get(c.text) for c in references]
        parts.append(stages.PartEvidence(part.question, tuple(n for n in numbers if n), reason, part.agent_type))
    return tuple(parts)


def _gate_weak_evidence(run: ChatRun, search: stages.KbSearch) -> None:
    """Drop the references when none holds enough of the question, or when it names what the KB
    never mentions: "not found", not noise."""
    minimum = run.options.min_evidence_coverage
    mentions = stages.mentioned(search.references, partial(kb_mentions, run.kb))
    never = stages.unmentioned(run.message, mentions) if search.references else ""
    if never:
        run.recorder.add("kb.answer_gate", "retrieval", start_ms=run.recorder.elapsed_ms(), ms=0.0, output=never, status="ok")
        search.references.clear()
        search.reason = never
        return
    if not (search.references and minimum > 0) or stages.held_across_languages(run.message, search.references):
        return
    # The user's words or their rewrite ("它的阈值呢？" needs the rewrite), whichever is held better.
    questions = {run.message, run.rewrite.query or run.message}
    # An agent that searched part by part: one part held well is enough to answer (its
    # warnings name the parts it could not cover).
    questions |= {part for result in search.results for part in result.parts}
    titles = stages.document_titles(search.references)
    coverage = max(
        stages.evidence_coverage(question, search.references, tokenize=analyze, expand=expand_query, titles=titles)
        for question in questions
    )
    if coverage < minimum:
        run.recorder.add("kb.answer_gate", "retrieval", start_ms=run.recorder.elapsed_ms(), ms=0.0,
                         output=f"best coverage {coverage:.2f} < {minimum:.2f}", status="ok")
        search.references.clear()
        search.reason = stages.WEAK_EVIDENCE


def _plan(run: ChatRun, parts: list[str]) -> list[RagRunSpec]:
    """The workers that search the KB for this message (none without a KB), one per part of a compound one."""
    if run.kb is None:
        return []
    options = run.options
    # "auto" runs the worker the route chose for the message (graph_agent for how things relate).
    routed = run.admitted.route
    agent_type = routed.agent_type if routed and options.agent_type == "auto" else options.agent_type
    return plan_for(run.kb.slug, agent_type, run.rewrite.queries or (run.message,), parts)


def compound_parts(run: ChatRun) -> list[str]:
    """The questions a compound message asks (chat.pipeline.compound), in its rewrite's words
    when the rewrite resolved what it points back to; [] for a message that asks one thing."""
    return split_question(run.rewrite.query or run.message, analyze) or split_question(run.message, analyze)


def _search_in_time(run: ChatRun, plan: list[RagRunSpec]) -> tuple[stages.KbSearch, tuple[tuple[str, dict], ...]]:
    """The KB search (its workers, agents, graph) within its timeout, and a `timeout` event when it
    ran out: then nothing comes from the KB, and the tools' results, which ran alongside, stand."""
    timeout_s = node_timeout_s("search")
    started = run.recorder.elapsed_ms()
    waited = wait_for(lambda: _search(run, plan), scope="search", timeout_s=timeout_s, apart=may_leave_thread(),
                      on_timeout=run.abandon)
    if waited.value is not None:
        if waited.timed_out:  # on this thread (inside a transaction): it could only be noted
            waited.value.warnings.append(f"the KB search ran over its {timeout_s:g} s timeout")
        return waited.value, ()
    fallback = "the tools' results alone"
    logger.warning("KB search timed out after %s s, continuing with %s", timeout_s, fallback)
    run.recorder.add("kb", "retrieval", start_ms=started, ms=round(waited.ms, 3), status="degraded",
                     error=f"timed out after {timeout_s:g} s; continuing with {fallback}")
    search = stages.KbSearch(reason=SEARCH_TIMED_OUT, warnings=[f"the KB search timed out after {timeout_s:g} s"])
    event = {"node": "search", "timeout_ms": round(waited.ms), "fallback": fallback}
    return search, (("timeout", event),)


def _search(run: ChatRun, plan: list[RagRunSpec]) -> stages.KbSearch:
    """Search the KB; a failing search is empty (the chat answers "not found"), its span says why."""
    with run.recorder.span("kb", "retrieval", input=[q for spec in plan for q in spec.queries]) as span:
        try:
            search = _run_workers(run, plan)
        except Exception as error:
            logger.warning("KB search failed, continuing without evidence: %s", error, exc_info=True)
            span.fail(error)
            return stages.KbSearch(reason=SEARCH_FAILED)
        span.output = f"{len(search.references)} references; {search.reason}".rstrip("; ")
    _record_retrieval_spans(run, span.start_ms, search)
    _record_tool_spans(run, search.tool_results)
    return search


def _run_workers(run: ChatRun, plan: list[RagRunSpec]) -> stages.KbSearch:
    """Fan the plan's retrieve-only workers out; merge what they found, once."""
    options = run.options
    # "auto" searches as the request or the KB's settings say; a chosen worker keeps its own mode.
    mode = stages.retrieval_params(run.kb, options).mode if options.agent_type == "auto" else None
    fanout = run_plan(
        plan, kb=run.kb, thread_id=run.conversation.session_id, retriever=run.collaborators.retriever,
        top_k=options.top_k, rerank=options.enable_rerank, mode=mode,
        on_event=_worker_events(run), llm=run.collaborators.llm, user=run.conversation.user,
        tools=AgentTools(run.collaborators.tools, run.intent.tools),
    )
    search = stages.collect_search(fanout.results)
    search.parts = fanout.parts
    search.tool_results = fanout.tool_results
    search.incomplete = fanout.incomplete
    search.warnings.extend(fanout.errors)
    return search


def _worker_events(run: ChatRun) -> Callable[[str, dict[str, Any]], None]:
    """What a multi-round worker reports (its thinking, each round) goes out as events and spans."""

    def report(kind: str, data: dict[str, Any]) -> None:
        if run.is_abandoned():  # a search past its timeout: the run has moved on
            return
        run.agent_steps.append({"type": kind, **data})
        run.emit(kind, "kb", **data)
        name = f"kb.{kind}" + (f".{data['round']}" if "round" in data else "")
        run.recorder.add(name, "retrieval", start_ms=run.recorder.elapsed_ms(), ms=0.0, input=data.get("queries", ""),
                         output=data.get("text") or data.get("found", ""))

    return report


def _record_retrieval_spans(run: ChatRun, start_ms: float, search: stages.KbSearch) -> None:
    """One span per retrieval step of each query (bm25, vector, fusion, rerank, gate …)."""
    rerank_error = next((w for w in search.warnings if w.startswith(stages.RERANK_WARNING)), "")
    offset = start_ms
    for result in search.results:
        for name, ms in result.timings_ms.items():
            if name == "total":
                continue
            error = rerank_error if name == "rerank" else ""
            status = "degraded" if error else "ok"
            # The gate's span says what it rejected and why (a scope the question named, a rerank score …).
            output = gate_trace(result.gate, result.scope) if name in ("gate", "scope") else ""
            run.recorder.add(f"kb.{name}", "retrieval", start_ms=round(offset, 3), ms=ms, status=status, error=error,
                             output=output)
            offset += ms


def _call_tools(run: ChatRun, calls: list) -> list[ToolResult]:
    context = ToolContext(user=run.conversation.user, kb=run.kb)
    results = run_calls(run.collaborators.tools, calls, context, timeout_s=node_timeout_s("tools") or settings.CHAT_TOOL_TIMEOUT_S)
    _record_tool_spans(run, results)
    return results


def _record_tool_spans(run: ChatRun, results: list[ToolResult]) -> None:
    for result in results:
        start = run.recorder.elapsed_ms() - result.ms
        run.recorder.add(f"tool.{result.name}", "tool", start_ms=start, ms=result.ms, input=result.parameters,
                         output=result.output, status="ok" if result.ok else "failed", error=result.error)


def _evidence_events(
    tool_results: list[ToolResult], evidence: tuple[EvidenceItem, ...], reason: str
) -> tuple[tuple[str, dict[str, Any]], ...]:
    tools = tuple(("tool", result.as_event()) for result in tool_results)
    shown = [item.as_event() for item in evidence]
    return (*tools, ("retrieval", {"count": len(shown), "evidence": shown, "reason": reason}))


def _url_for(run: ChatRun) -> Callable[[Any], str]:
    return stages.chunk_urls(run.kb.slug if run.kb else "")


def _prompt(run: ChatRun) -> Outcome:
    history = tuple(
        Turn(t.role, t.content[:HISTORY_TURN_CHARS])
        for t in stages.recent_turns(run.history, run.options.rewrite_history_turns)
    )
    prompt = assemble_prompt(
        run.rewrite.query, run.evidence, history,
        original=run.message, cite=run.options.enable_source_citation, temperature=run.options.temperature,
        memory=run.memory, general=run.kb is None, kb_name=run.kb.name if run.kb else "",
        terms=translate_question(run.rewrite.query, run.kb).words,
    )
    detail = f"{prompt.mode} · {prompt.task} · temperature {prompt.temperature} · {prompt.chars} chars"
    if not run.parts:
        return Outcome(StageStatus.DONE, detail, found={"prompt": prompt})
    # A compound question: each part is answered from its own evidence, under a prompt of its own.
    part_prompts = tuple(
        (part, assemble_prompt(
            part.question, stages.evidence_for_part(run.evidence, part.numbers), history,
            cite=run.options.enable_source_citation, temperature=run.options.temperature, memory=run.memory,
            kb_name=run.kb.name if run.kb else "", terms=translate_question(part.question, run.kb).words,
        ) if part.numbers else None)
        for part in run.parts
    )
    detail += f" · {len(part_prompts)} parts"
    return Outcome(StageStatus.DONE, detail, found={"prompt": prompt, "part_prompts": part_prompts})


def _generate(run: ChatRun) -> Outcome:
    assert run.prompt is not None
    llm = answer_llm(run.kb, run.collaborators.llm)
    if run.part_prompts:
        stream = _generate_parts(run, llm)
    else:
        stream = stages.open_stream(run.prompt, llm, max_tokens=run.options.max_answer_tokens)
        _stream_answer(run, stream, run.prompt)
    tries = len(getattr(stream, "attempts", ()))
    detail = f"{run.provider or 'llm'} · {len(run.pieces)} pieces" + (f" · {tries} attempts" if tries > 1 else "")
    if run.status == TraceStatus.CANCELLED:
        return Outcome(StageStatus.DONE, f"cancelled by the client: {detail}")
    if finished_by := getattr(stream, "finished_by", ""):
        # The answer is whole as an answer, but not the model's: stored as partial, saying why.
        why = "; ".join(filter(None, [run.incomplete, STOPPED_MID_ANSWER]))
        return Outcome(StageStatus.DONE, f"{detail} · stopped mid-answer, finished by {finished_by}",
                       found={"incomplete": why})
    return Outcome(StageStatus.DONE, detail)


def _stream_answer(run: ChatRun, stream: Any, prompt: Any, *, drop_label: bool = False) -> bool:
    """Deliver the stream's pieces; False when the run stopped taking them (cancelled, abandoned)."""
    with run.recorder.span("llm", "llm", input=prompt.as_text()) as span:
        try:
            for piece in _without_label(stream) if drop_label else stream:
                if run.is_abandoned():  # past the node's timeout: the runner has answered without it
                    return False
                if run.is_cancelled():
                    run.status = TraceStatus.CANCELLED
                    span.status = "cancelled"
                    return False
                run.deliver(piece)
        finally:
            _close(stream)
            if not run.is_abandoned():
                run.provider = getattr(stream, "provider", "") or run.provider
            span.output = "".join(run.pieces)
    return True


def _generate_parts(run: ChatRun, llm: Any) -> Any:
    """Answer a compound question part by part: a heading for each, then its answer from its own
    evidence, or a line saying nothing in the knowledge base answers it. The last stream opened
    is returned (what the stage reports of the model)."""
    stream: Any = None
    answered = False
    for n, (part, prompt) in enumerate(run.part_prompts, 1):
        run.deliver(("\n\n" if n > 1 else "") + part_heading(n, part.question) + "\n\n")
        if prompt is None:
            run.deliver(part_not_found(part.question, run.message))
            continue
        stream = stages.open_stream(prompt, llm, max_tokens=run.options.max_answer_tokens)
        if not _stream_answer(run, stream, prompt, drop_label=answered):
            break
        answered = True
    return stream


# What the extractive reader says its answer is: said once, above the first part, not over each.
_ANSWER_LABELS = tuple(label for labels in (DISCLAIMER, *FAILURE_LABELS.values()) for label in labels.values())


def _without_label(stream: Any) -> Any:
    """The stream's pieces with a leading answer label (and the line break after it) left out."""
    head = ""
    pieces = iter(stream)
    for piece in pieces:
        head += piece
        if len(head) > max(map(len, _ANSWER_LABELS)) + 2 or "\n" in head:
            break
    for label in _ANSWER_LABELS:
        if head.lstrip().startswith(label):
            head = head.lstrip()[len(label):].lstrip("\n")
            break
    if head:
        yield head
    yield from pieces


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()


HANDLERS: dict[str, Callable[[ChatRun], Outcome]] = {
    "memory": _memory,
    "rewrite": _rewrite,
    "intent": _intent,
    "guide": _guide,
    "system": _system,
    "retrieve": _retrieve,
    "prompt": _prompt,
    "generate": _generate,
}


# --- degrade paths: what a failed (or, for rewrite and intent, late) stage leaves instead ---------


def _degrade_memory(run: ChatRun, error: Exception) -> Outcome:
    return Outcome(StageStatus.FAILED, f"no history: {error}", found={"history": ()})


def _degrade_rewrite(run: ChatRun, error: Exception) -> Outcome:
    return Outcome(StageStatus.FAILED, f"kept the original query: {error}",
                   found={"rewrite": unchanged(run.message, "fallback")})


def _degrade_intent(run: ChatRun, error: Exception) -> Outcome:
    return Outcome(StageStatus.FAILED, f"default KB intent: {error}", found={"intent": DEFAULT_INTENT},
                   events=(("intent", DEFAULT_INTENT.as_event()),))


def _degrade_check(run: ChatRun, error: Exception) -> Outcome:
    return Outcome(StageStatus.FAILED, f"check skipped: {error}")


def _degrade_retrieve(run: ChatRun, error: Exception) -> Outcome:
    reply = no_evidence_reply(run.message, run.kb.name if run.kb else "", SEARCH_FAILED)
    return Outcome(StageStatus.FAILED, f"no evidence: {error}", Shortcut.C, found={"evidence": (), "reply": reply})


DEGRADES: dict[str, Callable[[ChatRun, Exception], Outcome]] = {
    "memory": _degrade_memory,
    "rewrite": _degrade_rewrite,
    "intent": _degrade_intent,
    "guide": _degrade_check,
    "system": _degrade_check,
    "retrieve": _degrade_retrieve,
}


def _generate_timed_out(run: ChatRun, error: Exception) -> Outcome:
    """The answer past its timeout: what streamed stands (partial), or the extractive reader answers."""
    if run.pieces:
        why = "; ".join(filter(None, [run.incomplete, ANSWER_TIMED_OUT]))
        return Outcome(StageStatus.FAILED, f"kept the {len(run.pieces)} pieces streamed: {error}",
                       found={"incomplete": why})
    assert run.prompt is not None
    stream = stages.open_stream(run.prompt, extractive_reader(run.collaborators.llm),
                                max_tokens=run.options.max_answer_tokens)
    try:
        for piece in stream:
            run.deliver(piece)
    finally:
        _close(stream)
    return Outcome(StageStatus.FAILED, f"the extractive reader answered: {error}", found={"provider": "extractive"})


def extractive_reader(llm: Any) -> Any:
    """The offline reader that quotes the evidence: the router's own, or a router of it alone."""
    return llm.extractive_only() if isinstance(llm, ModelRouter) else build_llm(LLMConfig())


# Timeouts that degrade where a failure does not: a model that errs fails the answer (the
# router already fell back), one that is still talking at the timeout leaves what it said.
TIMEOUT_DEGRADES: dict[str, Callable[[ChatRun, Exception], Outcome]] = {
    "generate": _generate_timed_out,
}


def answer_llm(kb: Any, llm: Any) -> Any:
    """The model that writes this KB's answers: its owner may prefer one model, or want the
    sources quoted and no model at all. Other stages (rewrite, intent) use the default."""
    if kb is None or not isinstance(llm, ModelRouter):
        return llm
    if kb.answer_mode == AnswerMode.EXTRACTIVE:
        return llm.extractive_only()
    if kb.answer_model_id and kb.answer_model.enabled:
        return llm.preferring(kb.answer_model.name)
    return llm

