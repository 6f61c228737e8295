"""One interface language at a time: the browser's, unless the switch chose another; the
Chinese catalogue is complete, compiled, and keeps every placeholder."""

from __future__ import annotations

import gettext
import json
import re
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings

from agentic_rag.asgi import application
from agentic_rag.locale import language_from_scope
from chat.tests.web_factories import session_cookie

CATALOGUE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"
PLACEHOLDER = re.compile(r"%\(\w+\)s|%s|\{\w+\}")
CHINESE = "zh-CN,zh;q=0.9,en;q=0.8"


def po_entries(path: Path) -> list[tuple[str, str, str]]:
    """(msgid, msgid_plural, msgstr) of each entry of a .po file, header excluded."""
    entries, fields, current = [], {}, ""
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        match = re.match(r'^(msgid|msgid_plural|msgstr|msgstr\[0\]) (".*")$', line)
        if match:
            current = match.group(1).replace("[0]", "")
            fields[current] = json.loads(match.group(2))
        elif line.startswith('"') and current:
            fields[current] += json.loads(line)
        elif not line.strip() and fields:
            if fields.get("msgid"):
                entries.append((fields["msgid"], fields.get("msgid_plural", ""), fields.get("msgstr", "")))
            fields, current = {}, ""
    return entries


def test_every_message_is_translated_with_its_placeholders():
    entries = po_entries(CATALOGUE / "django.po")
    assert len(entries) > 300
    untranslated = [msgid for msgid, _plural, msgstr in entries if not msgstr]
    assert untranslated == []
    for msgid, _plural, msgstr in entries:
        assert sorted(PLACEHOLDER.findall(msgid)) == sorted(PLACEHOLDER.findall(msgstr)), msgid
        assert sorted(re.findall(r"<[^>]+>", msgid)) == sorted(re.findall(r"<[^>]+>", msgstr)), msgid


def test_the_compiled_catalogue_matches_its_source():
    """The .mo file is committed (no gettext tools needed at setup); it must not lag the .po."""
    with (CATALOGUE / "django.mo").open("rb") as compiled:
        catalogue = gettext.GNUTranslations(compiled)
    for msgid, plural, msgstr in po_entries(CATALOGUE / "django.po"):
        translated = catalogue.ngettext(msgid, plural, 1) if plural else catalogue.gettext(msgid)
        assert translated == msgstr, f"run `make messages`: {msgid!r} is stale in django.mo"


@pytest.mark.parametrize(
    ("cookie", "accept", "expected"),
    [
        ("", "zh-CN,zh;q=0.9", "zh-hans"),
        ("", "en-US,en;q=0.9,zh;q=0.8", "en"),
        ("", "fr-FR, de;q=0.5", "en"),  # nothing we speak: the default
        ("", "", "en"),
        ("en", "zh-CN", "en"),  # the switch wins over the browser
        ("zh-hans", "en-US", "zh-hans"),
        ("klingon", "zh-TW", "zh-hans"),  # a forged cookie falls back to the browser
    ],
)
def test_a_websocket_speaks_the_language_its_page_was_in(cookie, accept, expected):
    scope = {"cookies": {"django_language": cookie} if cookie else {}, "headers": [(b"accept-language", accept.encode())]}
    assert language_from_scope(scope) == expected


@pytest.mark.django_db
def test_pages_follow_the_browser_language(client, alice):
    client.force_login(alice)
    chinese = client.get("/", HTTP_ACCEPT_LANGUAGE=CHINESE).content.decode()
    assert '<html lang="zh-hans">' in chinese
    assert "新对话" in chinese and "发送" in chinese and "知识库" in chinese
    assert "New chat" not in chinese and "Send</button>" not in chinese
    english = client.get("/", HTTP_ACCEPT_LANGUAGE="en-US").content.decode()
    assert '<html lang="en">' in english and "New chat" in english and "新对话" not in english


@pytest.mark.django_db
def test_the_switch_keeps_its_choice_over_the_browser(client, alice):
    client.force_login(alice)
    page = client.get("/kb/", HTTP_ACCEPT_LANGUAGE=CHINESE).content.decode()
    assert 'name="language" value="en"' in page  # in Chinese the switch offers English
    response = client.post("/i18n/setlang/", {"language": "en", "next": "/kb/"}, HTTP_ACCEPT_LANGUAGE=CHINESE)
    assert response.status_code == 302 and response["Location"] == "/kb/"
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "en"
    page = client.get("/kb/", HTTP_ACCEPT_LANGUAGE=CHINESE).content.decode()
    assert '<html lang="en">' in page and 'name="language" value="zh-hans"' in page


@pytest.mark.django_db
def test_the_switch_refuses_a_foreign_next_url(client, alice):
    client.force_login(alice)
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "https://evil.example/"})
    assert response.status_code == 302 and response["Location"] == "/"


@pytest.mark.django_db(transaction=True)
async def test_streamed_fragments_speak_the_connection_language(alice):
    cookie = await _cookie(alice)
    headers = [(b"origin", b"http://127.0.0.1"), (b"cookie", cookie.encode()), (b"accept-language", b"zh-CN")]
    communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_to(text_data=json.dumps({"message": "  ", "session_id": "", "kb": "auto"}))
    fragment = await communicator.receive_from(timeout=5)
    await communicator.disconnect()
    assert "消息为空。" in fragment and "The message is empty." not in fragment


async def _cookie(user) -> str:
    from channels.db import database_sync_to_async

    return await database_sync_to_async(session_cookie)(user)
