"""Seed a sample rate table so the currency tool works offline (it says it is a sample), and
move thumbs stored in Message.debug["feedback"] before the Feedback model into Feedback rows."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db import migrations

AS_OF = date(2025, 1, 2)
SOURCE = "sample table shipped with the app (approximate rates of 2025-01-02), not live data"
PER_USD = {
    "USD": "1", "CNY": "7.2993", "EUR": "0.9662", "GBP": "0.8003", "JPY": "157.20", "HKD": "7.7680",
    "KRW": "1470.50", "SGD": "1.3650", "AUD": "1.6110", "CAD": "1.4390", "CHF": "0.9080", "INR": "85.75",
}


def seed(apps, schema_editor):
    CurrencyRate = apps.get_model("chat", "CurrencyRate")
    for code, rate in PER_USD.items():
        CurrencyRate.objects.get_or_create(code=code, as_of=AS_OF, defaults={"per_usd": Decimal(rate), "source": SOURCE})


def unseed(apps, schema_editor):
    apps.get_model("chat", "CurrencyRate").objects.filter(as_of=AS_OF, source=SOURCE).delete()


def move_feedback(apps, schema_editor):
    Message = apps.get_model("chat", "Message")
    Feedback = apps.get_model("chat", "Feedback")
    for message in Message.objects.filter(role="assistant").select_related("conversation", "trace").iterator():
        stored = (message.debug or {}).get("feedback") if isinstance(message.debug, dict) else None
        if not isinstance(stored, dict) or stored.get("value") not in ("up", "down"):
            continue
        Feedback.objects.get_or_create(
            user_id=message.conversation.user_id, message=message,
            defaults={"trace": message.trace, "is_positive": stored["value"] == "up",
                      "query": message.trace.question if message.trace else "", "metadata": {"moved_from": "debug"}},
        )


class Migration(migrations.Migration):
    dependencies = [("chat", "0002_currency_rate_feedback")]
    operations = [
        migrations.RunPython(seed, unseed),
        migrations.RunPython(move_feedback, migrations.RunPython.noop),
    ]
