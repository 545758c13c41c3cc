"""A date argument needs a date in the user's words.

The calendar in the system prompt (`toolwire.models.local_calendar`) lays this year's ranges out
before the model, and a 1.5B model then filters "How much have I spent overall?" by this year so
far; it is sure of that range, so no bias on optional arguments removes it. The closing bias that
keeps unasked filters out (`toolwire.models.local_closing`) has the opposite fault: "my travel
bookings from January 2025" ends after the category. Whether the user named a time at all is a
question about the message alone, and the model answers it well when asked apart: on the three
case sets in benchmarks/ it was chosen on, the mean share of *yes* of the two phrasings below was
at least 0.63 for every message that gives a day, a date or a period, and at most 0.56 for every
one that does not (most below 0.45; "overall" 0.41, "no date filter" 0.30); on the two sets
written after, at least 0.65 and at most 0.56 (leaving aside "today", which names a day).

So when a call's tool has optional date parameters, a call in answer to a user's message is
checked once: below the threshold its date arguments are dropped; at or above it, a call that
has none gets those the model writes when decoded without the closing bias.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from toolwire.messages import ToolCall, ToolSpec
from toolwire.models.local_calendar import optional_dates
from toolwire.models.local_engine import asked_apart
from toolwire.models.local_prompt import CALL_MAX_TOKENS, call_grammar

if TYPE_CHECKING:
    from toolwire.models.local_engine import Engine

__all__ = ["date_questions", "dated_calls", "with_dates"]

logger = logging.getLogger("toolwire.models.local")  # one logger for all of the model's decisions


def date_questions(asked: str) -> list[list[dict[str, Any]]]:
    """Two phrasings of one question apart from the conversation: does `asked` name a time?

    Each phrasing alone lets a message that names a day fall below one that names none (the
    first is unsure of "this month", the second of "last Monday"); their mean does not.
    """
    return [
        [
            {
                "role": "user",
                "content": f'A user wrote: "{asked}"\n\nDoes the user name a specific day, date, month, '
                "year or time period (such as yesterday, last month, March or 2025-01-05)? "
                "Answer with yes or no.",
            }
        ],
        [
            {"role": "system", "content": "You judge messages. Answer only yes or no."},
            {
                "role": "user",
                "content": f'Message: "{asked}"\n\nIs the message about a particular time: a day, a date, '
                "a month, a year or a range of dates?",
            },
        ],
    ]


def with_dates(arguments: str, dates: list[str], *, named: bool, redecoded: str | None = None) -> str:
    """`arguments` with the date arguments among `dates` as the user's words allow.

    Args:
        arguments: The call's arguments as decoded (a JSON object).
        dates: The tool's optional date parameters.
        named: Whether the user's message names a day, a date or a period.
        redecoded: The same call decoded without the closing bias, whose date arguments are
            taken when the user named a time and the call has none.
    """
    args = json.loads(arguments)
    present = [name for name in dates if name in args]
    if not named and present:
        return json.dumps({k: v for k, v in args.items() if k not in dates}, ensure_ascii=False)
    if named and not present and redecoded is not None:
        # An empty string is no date (the model's way of writing an argument it has no value for).
        found = {k: v for k, v in json.loads(redecoded).items() if k in dates and v != ""}
        if found:
            return json.dumps({**args, **found}, ensure_ascii=False)
    return arguments


def names_time(engine: Engine, asked: str, threshold: float) -> bool:
    """Whether the model, asked apart, says `asked` names a day, a date or a period."""
    share = asked_apart(engine, date_questions(asked))
    if share is None:
        return True  # too long to ask apart: the model's own arguments stand
    logger.debug("a time named in the message: yes share %.3f", share)
    return share >= threshold


def dated_calls(
    engine: Engine,
    context: list[int],
    calls: list[ToolCall],
    offered: list[ToolSpec],
    asked: str,
    threshold: float,
    stop: threading.Event,
) -> tuple[list[ToolCall], int]:
    """`calls` with the date arguments that `asked` allows, and the tokens spent decoding again.

    The question is asked once, and only when a call's tool has optional date parameters; a call
    decoded again (after `context`, under its own tool's grammar, without the closing bias)
    lends its date arguments only.
    """
    named: bool | None = None
    spent = 0
    out: list[ToolCall] = []
    for call in calls:
        tool = next(t for t in offered if t.name == call.name)
        dates = optional_dates(tool)
        if not dates or stop.is_set():
            out.append(call)
            continue
        named = names_time(engine, asked, threshold) if named is None else named
        redecoded: str | None = None
        if named and not any(d in json.loads(call.arguments) for d in dates):
            # The closing bias may have ended the call before the period the user named.
            for _, arguments, used in engine.constrained_calls(
                context, call_grammar([tool]), limit=1, max_tokens=CALL_MAX_TOKENS, stop=stop
            ):
                redecoded, spent = arguments, spent + used
        arguments = with_dates(call.arguments, dates, named=named, redecoded=redecoded)
        out.append(ToolCall(id=call.id, name=call.name, arguments=arguments))
    return out, spent
