"""The currency tool: convert an amount with the newest rates in the CurrencyRate table."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

# Names people write for a currency, and its ISO code.
NAMES: dict[str, str] = {
    "美元": "USD", "美金": "USD", "人民币": "CNY", "元": "CNY", "rmb": "CNY", "欧元": "EUR", "英镑": "GBP",
    "日元": "JPY", "港币": "HKD", "港元": "HKD", "韩元": "KRW", "新加坡元": "SGD", "澳元": "AUD", "加元": "CAD",
    "瑞士法郎": "CHF", "卢比": "INR", "dollars": "USD", "dollar": "USD", "yuan": "CNY", "euros": "EUR",
    "euro": "EUR", "pounds": "GBP", "pound": "GBP", "yen": "JPY",
}
CODES = ("USD", "CNY", "EUR", "GBP", "JPY", "HKD", "KRW", "SGD", "AUD", "CAD", "CHF", "INR")
_CURRENCY = re.compile(
    "|".join(
        [re.escape(n) if not n.isascii() else rf"\b{n}\b" for n in sorted(NAMES, key=len, reverse=True)]
        + [rf"\b{code}\b" for code in CODES]
    ),
    re.IGNORECASE,
)
_AMOUNT = re.compile(r"(\d+(?:,\d{3})*(?:\.\d+)?)")


def _code(name: str) -> str:
    return NAMES.get(name.lower(), NAMES.get(name, name.upper()))


def extract(message: str) -> dict[str, Any] | None:
    """`{"amount", "from", "to"}` from "100 USD to CNY" or "100美元换人民币"; None without two currencies."""
    codes = list(dict.fromkeys(_code(m.group(0)) for m in _CURRENCY.finditer(message)))
    if not codes:
        return None
    amount = _AMOUNT.search(message)
    source = codes[0]
    target = codes[1] if len(codes) > 1 else ("CNY" if source != "CNY" else "USD")
    return {"amount": amount.group(1).replace(",", "") if amount else "1", "from": source, "to": target}


def handle(parameters: dict[str, Any]) -> str:
    from chat.models import CurrencyRate  # the apps are loaded by the time a tool runs

    try:
        amount = Decimal(str(parameters.get("amount", "1")))
    except InvalidOperation as error:
        raise ValueError(f"not an amount: {parameters.get('amount')!r}") from error
    source, target = str(parameters.get("from", "")).upper(), str(parameters.get("to", "")).upper()
    table = CurrencyRate.objects.filter(code__in=[source, target]).latest_table()
    missing = [code for code in (source, target) if code not in table]
    if missing:
        return f"No exchange rate for {', '.join(missing)} in the rate table."
    rate = table[target].per_usd / table[source].per_usd
    as_of = min(table[source].as_of, table[target].as_of)
    sources = {table[source].source, table[target].source} - {""}
    note = f"; source: {'; '.join(sorted(sources))}" if sources else ""
    # One sentence, so a quoting answer cannot keep the figure and drop its date and source.
    return (
        f"{amount:f} {source} = {amount * rate:,.2f} {target} "
        f"(1 {source} = {rate:.4f} {target}, rates of {as_of:%Y-%m-%d}{note})."
    )


PARAMETERS = {
    "type": "object",
    "properties": {
        "amount": {"type": "string", "description": "a decimal number"},
        "from": {"type": "string", "enum": list(CODES)},
        "to": {"type": "string", "enum": list(CODES)},
    },
    "required": ["amount", "from", "to"],
}
