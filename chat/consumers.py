"""The chat websocket: one per page. A question comes in as the form's JSON (htmx-ext-ws
`ws-send`); every pipeline event goes out as HTML that htmx swaps out of band, rendered
from the partials of the chat page, so a streamed answer ends up looking exactly like a
stored one."""

from __future__ import annotations

import asyncio
import logging
import uuid

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.loader import render_to_string
from django.utils.html import escape
from django.utils.translation import gettext_lazy

from agentic_rag.db_threads import database_sync_to_async
from agentic_rag.input_hygiene import BadInput, check_types, loads_frame
from agentic_rag.ratelimit import Decision, check_rate

from .adapters import error_event
from .cards import StageCard, card_ended, card_started, cards_by_id, stage_lanes
from .events import PipelineEvent
from .evidence import evidence_items, fold_agent_step, message_evidence
from .forms import ASK_FIELD_TYPES, AskForm, chat_request
from .models import Conversation, Message
from .pipeline import ChatRefused, aiter_chat, export_graph

logger = logging.getLogger(__name__)

PAGE = "chat/chat.html"
SIDEBAR_SIZE = 50
BUSY = gettext_lazy("Still answering the last question.")
FRAME_FIELD_TYPES = {**ASK_FIELD_TYPES, "action": str}


class ChatConsumer(AsyncWebsocketConsumer):
    # The chat talks to its own socket only, never through groups: without a channel layer
    # it keeps working when Redis, which carries that layer on the full stack, is down.
    channel_layer_alias = None
    run: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.user = user
        self.lanes = stage_lanes(export_graph())
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.run and not self.run.done():
            self.run.cancel()  # the pipeline stores the partial answer

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            data = _frame_data(text_data)
        except BadInput as error:  # refused before anything is shown or stored
            await self.send(text_data=_render("toast", {"text": str(error)}))
            return
        if data.get("action") == "stop":
            await self._stop()
            return
        if self.run and not self.run.done():
            await self.send(text_data=_render("toast", {"text": BUSY}))
            return
        # The question shows at once. The checks below wait for the thread that every session's
        # database work shares; under load (200 sessions) that took the first fragment seconds.
        question = _question_in(data)
        if question:
            self._begin_turn(question)
            await self.send(text_data=_render("turn", self._turn_context()))
        decision = await _check_rate(self.user, self.scope.get("session"))
        if not decision.allowed:  # the question is dropped, not queued
            await self._refuse(decision.message, shown=bool(question))
            return
        form = await _parse(data, self.user)
        if not form.is_valid():
            await self._refuse(form.first_error(), shown=bool(question))
            return
        self.run = asyncio.create_task(self._answer(form))

    async def _refuse(self, reason: str, *, shown: bool) -> None:
        """Say why the question is not answered: under it when it is shown, else as a toast."""
        if shown:
            await self.send(text_data=_render("turn-refused", {"turn": self.turn, "text": reason}))
        else:
            await self.send(text_data=_render("toast", {"text": reason}))

    async def _answer(self, form: AskForm) -> None:
        try:
            async for event in aiter_chat(chat_request(form)):
                await getattr(self, f"chat_{event.type}", self.chat_unknown)(event)
        except Exception as error:  # ChatRefused included: its message is for the user
            if not isinstance(error, ChatRefused):
                logger.exception("chat run failed")
            await self.chat_error(error_event(error))

    async def _stop(self) -> None:
        """Stop the answer being written; the pipeline stores what was written, marked partial."""
        if self.run is None or self.run.done():
            return
        self.run.cancel()
        await self.send(text_data=_render("stopped", {"turn": self.turn}))
        for card in self.cards.values():  # the stages still running end here
            if card.state == "running":
                await self._send_card(card_ended(card, 0.0, {"status": "skipped", "detail": "stopped"}))

    def _begin_turn(self, question: str) -> None:
        self.turn = uuid.uuid4().hex[:12]
        self.question = question
        self.cards = cards_by_id(self.lanes)
        self.meta: dict = {}
        self.evidence: list = []
        self.answer_text = ""

    def _turn_context(self, **extra) -> dict:
        return {"turn": self.turn, "question": self.question, "lanes": self._lanes(), **extra}

    def _lanes(self) -> list[list[StageCard]]:
        return [[self.cards[card.id] for card in lane] for lane in self.lanes]

    async def _send_card(self, card: StageCard) -> None:
        self.cards[card.id] = card
        await self.send(text_data=_render("stage-card", {"card": card, "oob_card": True}))

    async def _send_meta(self) -> None:
        await self.send(text_data=_render("run-meta", {"turn": self.turn, "meta": self.meta}))

    # Handlers, one per pipeline event type: `token` → chat_token.

    async def chat_session(self, event: PipelineEvent) -> None:
        session_id = event.data.get("session_id", "")
        self.session_id = session_id
        await self.send(text_data=await _render_session(self.user, session_id))

    async def chat_stage_start(self, event: PipelineEvent) -> None:
        if event.stage in self.cards:
            await self._send_card(card_started(self.cards[event.stage]))

    async def chat_stage_end(self, event: PipelineEvent) -> None:
        if event.stage in self.cards:
            await self._send_card(card_ended(self.cards[event.stage], event.ms, event.data))

    async def chat_route(self, event: PipelineEvent) -> None:
        self.meta["route"] = event.data
        await self._send_meta()

    async def chat_intent(self, event: PipelineEvent) -> None:
        self.meta["intents"] = event.data.get("intents", [])
        await self._send_meta()

    async def chat_tool(self, event: PipelineEvent) -> None:
        self.meta.setdefault("tools", []).append(event.data.get("name") or event.data.get("tool", "tool"))
        await self._send_meta()

    async def chat_thinking(self, event: PipelineEvent) -> None:
        fold_agent_step(self.meta, {"type": event.type, **event.data})
        await self._send_meta()

    chat_round = chat_plan = chat_task = chat_report = chat_step = chat_thinking

    async def chat_retrieval(self, event: PipelineEvent) -> None:
        self.evidence = evidence_items(event.data.get("evidence"))
        context = {"key": self.turn, "items": self.evidence, "oob_list": "true", "active": True}
        await self.send(text_data=_render("evidence-list", context))

    async def chat_citation(self, event: PipelineEvent) -> None:
        """Nothing to draw yet: the final fragment links every resolved citation at once."""

    async def chat_clarify(self, event: PipelineEvent) -> None:
        """The Clarifier's choices, as buttons under the turn; its question streams as the answer."""
        context = {"turn": self.turn, "clarification": event.data, "session_id": getattr(self, "session_id", "")}
        await self.send(text_data=_render("clarify-live", context))

    async def chat_first_token(self, event: PipelineEvent) -> None:
        self.meta["first_token_ms"] = event.ms
        await self._send_meta()

    async def chat_token(self, event: PipelineEvent) -> None:
        text = str(event.data.get("text", ""))
        self.answer_text += text
        await self.send(text_data=f'<span hx-swap-oob="beforeend:#answer-{self.turn}">{escape(text)}</span>')

    async def chat_final(self, event: PipelineEvent) -> None:
        await self.send(text_data=await _render_final(self.turn, event.data, self.evidence))

    async def chat_error(self, event: PipelineEvent) -> None:
        context = self._turn_context(text=self.answer_text, message=event.data.get("message", ""))
        await self.send(text_data=_render("answer-error", context))

    async def chat_unknown(self, event: PipelineEvent) -> None:
        logger.debug("chat websocket ignores event %s", event.type)


def _render(partial: str, context: dict) -> str:
    return render_to_string(f"{PAGE}#{partial}", context).strip()


@database_sync_to_async
def _check_rate(user, session) -> Decision:
    return check_rate(user.pk, getattr(session, "session_key", "") or "")


def _frame_data(text_data: str | None) -> dict:
    """The websocket message as the chat form's data, or BadInput saying what is wrong with it."""
    data = loads_frame(text_data)
    check_types(data, FRAME_FIELD_TYPES)
    return data


def _question_in(data: dict) -> str:
    """The message of a chat form's data, when it is one that could be asked; else ""."""
    message = data.get("message") or ""
    if len(message) > settings.CHAT_MAX_MESSAGE_CHARS:
        return ""
    return message.strip()


@database_sync_to_async
def _parse(data: dict, user) -> AskForm:
    form = AskForm(data, user=user)
    form.is_valid()  # runs the KB query here, off the event loop
    return form


@database_sync_to_async
def _render_session(user, session_id: str) -> str:
    sessions = Conversation.objects.for_user(user)
    context = {
        "session_id": session_id,
        "sessions": sessions[:SIDEBAR_SIZE],
        "current_id": session_id,
        "conversation": sessions.filter(session_id=session_id).first(),
    }
    return _render("session-update", context)


@database_sync_to_async
def _render_final(turn: str, data: dict, evidence: list) -> str:
    message = (
        Message.objects.filter(trace__trace_id=data.get("trace_id"), role="assistant")
        .select_related("trace", "conversation")
        .order_by("-pk")
        .first()
        if data.get("trace_id")
        else None
    )
    items = message_evidence(message) if message else []
    context = {"turn": turn, "message": message, "data": data, "items": items or evidence}
    return _render("final", context)
