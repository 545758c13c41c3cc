"""The loaded llama.cpp model, shared per process: template, token-level generation, grammar.

`load_engine` loads a GGUF file once per process (per path and settings) and hands every caller
the same `Engine`; its `lock` serialises inference, because one llama.cpp context holds one
sequence. The KV cache keeps the longest common prefix between requests, so the system prompt and
the tools section are evaluated once, not per request.

llama_cpp is imported here only, and lazily: toolwire imports without the `local` extra.
"""

from __future__ import annotations

import atexit
import codecs
import json
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment

from toolwire.messages import ToolSpec
from toolwire.models.local_closing import ClosingBias
from toolwire.models.local_model_files import LocalModelError, ModelFileError, check_gguf, check_memory

__all__ = ["Engine", "asked_apart", "load_engine"]

_CALL_OPEN = "<tool_call>"
_CALL_CLOSE = "</tool_call>"
_CALL_STARTS = (_CALL_OPEN, "```", "{")
_ENGINES: dict[tuple[str, int, int], Engine] = {}
_JUDGE_CTX = 1024
"""Tokens of the second context, for short questions asked apart from the conversation."""
_LOAD_LOCK = threading.Lock()


def _starts_markup(piece: str) -> bool:
    """Whether an answer starting with `piece` starts a call or the chat template's tool markup.

    Denied the whole `<tool_call>` token, a model that wanted to call picks its next best: `<`,
    `<tool`, `<tools>`, and then writes out the tool definitions from its prompt as its answer.
    """
    text = piece.strip()
    if not text:
        return False
    return text.startswith((*_CALL_STARTS, "<tool")) or any(s.startswith(text) for s in _CALL_STARTS)


def asked_apart(engine: Engine, questions: list[list[dict[str, Any]]]) -> float | None:
    """The mean share of *yes* the model gives to phrasings of one yes-or-no question.

    Each is asked apart from the conversation (see `Engine.yes_share`); `None` when one is too
    long for that second context.
    """
    tokens = [engine.tokenize(engine.render(q, ())) for q in questions]
    if any(len(t) >= engine.judge_n_ctx for t in tokens):
        return None
    return sum(engine.yes_share(t) for t in tokens) / len(tokens)


def _default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _built_with_amx(lib: Any) -> bool:
    """Whether this llama.cpp build uses AMX (a native build on a CPU that advertises it)."""
    info = lib.llama_print_system_info()
    return b"AMX_INT8 = 1" in (info if isinstance(info, bytes) else str(info).encode())


def load_engine(path: Path, *, n_ctx: int = 4096, n_threads: int | None = None) -> Engine:
    """The process-wide engine for `path`, loaded on first use.

    Raises:
        LocalModelError: llama-cpp-python is not installed, or memory is short.
        ModelFileError: The file is missing, not GGUF, or llama.cpp cannot load it.
    """
    threads = n_threads or _default_threads()
    key = (str(path.resolve()), n_ctx, threads)
    with _LOAD_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            if not _ENGINES:
                atexit.register(_close_engines)
            engine = _ENGINES[key] = Engine(path, n_ctx=n_ctx, n_threads=threads)
        return engine


def _close_engines() -> None:
    # Freed while the interpreter is whole: llama-cpp-python's own finaliser runs during shutdown,
    # after the library's globals are gone, and prints a traceback on the way out.
    for engine in _ENGINES.values():
        engine.close()
    _ENGINES.clear()


def _new_llama(path: Path, n_ctx: int, n_threads: int) -> Any:
    try:
        import llama_cpp
        import llama_cpp.llama_cpp as lib
    except ImportError:
        raise LocalModelError(
            "The embedded model needs llama-cpp-python; install the local extra: "
            "pip install 'toolwire[local]'."
        ) from None
    original = lib.llama_model_default_params

    def params() -> Any:
        p = original()
        # llama.cpp's AMX matmul (reached only through the extra weight buffers) crashed with a
        # segfault on the first decode on our machines; the plain CPU path is safe everywhere.
        p.use_extra_bufts = False
        return p

    if _built_with_amx(lib) and hasattr(original(), "use_extra_bufts"):
        lib.llama_model_default_params = params
    try:
        return llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_batch=512, verbose=False
        )
    except (ValueError, RuntimeError) as exc:
        raise ModelFileError(
            f"llama.cpp cannot load the local model file at {path} ({exc}); the file is damaged or "
            "not a supported model: delete it and run `make demo` again, or set TOOLWIRE_LOCAL_MODEL."
        ) from None
    finally:
        lib.llama_model_default_params = original


class Engine:
    """One loaded model: its chat template, special tokens and a lock that serialises inference."""

    def __init__(self, path: Path, *, n_ctx: int, n_threads: int) -> None:
        check_gguf(path)
        # The weights (mapped) plus the KV cache (about 32 KiB a token for these sizes) and
        # llama.cpp's compute buffers (about 300 MiB).
        check_memory(path, overhead=(n_ctx << 15) + (320 << 20))
        self.llm = _new_llama(path, n_ctx, n_threads)
        self.path = path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.judge_n_ctx = _JUDGE_CTX
        """The longest question `yes_share` can be asked (in tokens)."""
        self._judge: Any = None
        self.lock = threading.Lock()
        """Held for the whole of one request: one context, one sequence at a time."""
        meta: dict[str, str] = self.llm.metadata
        self.name = meta.get("general.name") or path.stem
        source = meta.get("tokenizer.chat_template")
        if not source:
            raise ModelFileError(
                f"The model file at {path} has no chat template; use an instruction-tuned GGUF."
            )
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        # Templates expect Hugging Face's tojson (no HTML escaping), not Jinja's.
        env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise ModelFileError(
                f"The chat template in {path} cannot be read ({exc}); use another GGUF."
            ) from None
        self._bos = self._piece(self.llm.token_bos())
        self._eos = self._piece(self.llm.token_eos())
        self.n_vocab: int = self.llm.n_vocab()
        pieces = [self._piece(t) for t in range(self.n_vocab)]
        self._call_start = np.array([t for t, s in enumerate(pieces) if s.strip().startswith(_CALL_STARTS)])
        self._no_answer_start = np.array([t for t, s in enumerate(pieces) if _starts_markup(s)])
        self._closing = ClosingBias.groups(pieces)
        self._eog = np.array([t for t in range(self.n_vocab) if self._is_eog(t)])
        self._eog_set = frozenset(int(t) for t in self._eog)
        self._yes = self._first_tokens("yes", "Yes", "YES", " yes", " Yes")
        self._no = self._first_tokens("no", "No", "NO", " no", " No")
        self.call_open = self.tokenize(_CALL_OPEN + "\n")
        self.call_close = self.tokenize("\n" + _CALL_CLOSE + "\n")
        self._open_id = self.call_open[0]

    def _first_tokens(self, *words: str) -> Any:
        return np.array(sorted({self.tokenize(word)[0] for word in words}))

    def _piece(self, token: int) -> str:
        return bytes(self.llm.detokenize([token], special=True)).decode("utf-8", errors="replace")

    def _is_eog(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token))

    def render(self, messages: list[dict[str, Any]], tools: Sequence[ToolSpec]) -> str:
        """The prompt text from the model's own chat template, ending where the assistant speaks."""
        specs = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in tools
        ]

        def raise_exception(message: str) -> None:
            raise ModelFileError(f"The model's chat template refused the conversation: {message}.")

        return self._template.render(
            messages=messages,
            tools=specs or None,
            add_generation_prompt=True,
            bos_token=self._bos,
            eos_token=self._eos,
            raise_exception=raise_exception,
            strftime_now=lambda fmt: datetime.now().astimezone().strftime(fmt),
        )

    def tokenize(self, text: str) -> list[int]:
        """Tokens of `text`, special tokens (such as `<|im_start|>`) recognised."""
        return list(self.llm.tokenize(text.encode(), add_bos=False, special=True))

    def close(self) -> None:
        """Free the loaded model and its contexts."""
        self.llm.close()
        if self._judge is not None:
            self._judge.close()

    def _next_probabilities(self, tokens: list[int], llm: Any = None) -> Any:
        """The next-token distribution after `tokens` (the prompt's common prefix is reused)."""
        import llama_cpp

        llm = llm or self.llm
        generator = llm.generate(tokens, temp=0.0)
        next(generator)  # evaluates the prompt; the sampled token itself is not evaluated
        generator.close()
        # The public API keeps logits only with logits_all=True (every position, slower), so the
        # last row is read from the context directly.
        raw = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(raw, shape=(self.n_vocab,)).astype(np.float64)
        logits -= logits.max()
        probs = np.exp(logits)
        return probs / probs.sum()

    def call_probability(self, tokens: list[int]) -> float:
        """The probability the model gives to opening a tool call as its next token."""
        return float(self._next_probabilities(tokens)[self._call_start].sum())

    def yes_share(self, tokens: list[int]) -> float:
        """Of the probability the next token says yes or no, the share of yes (0.5 when neither).

        Asked in a second, small context on the same (mapped, so shared) weights: the conversation's
        prompt stays cached in the first, and the next turn does not evaluate it again.
        """
        if self._judge is None:
            try:
                self._judge = _new_llama(self.path, self.judge_n_ctx, self.n_threads)
            except ModelFileError:
                # The same file loaded a moment ago: what is short now is memory.
                raise LocalModelError(
                    "The local model could not open its second, small context for the second look "
                    "before a call; free some memory, or pass confirm_threshold=None to LocalModel."
                ) from None
        probs = self._next_probabilities(tokens, self._judge)
        yes, no = float(probs[self._yes].sum()), float(probs[self._no].sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    def constrained_calls(
        self,
        tokens: list[int],
        grammar: str,
        *,
        limit: int,
        max_tokens: int,
        stop: threading.Event,
        closing_bias: float = 0.0,
    ) -> Iterator[tuple[str, str, int]]:
        """Decode up to `limit` calls under `grammar`; yields `(name, arguments JSON, tokens used)`.

        After each call the model decides freely whether another `<tool_call>` follows.
        `closing_bias` makes it add optional arguments less readily (see `ClosingBias`).
        """
        from llama_cpp import LogitsProcessorList
        from llama_cpp.llama_grammar import LlamaGrammar

        context = tokens + self.call_open
        for n in range(limit):
            if len(context) + max_tokens > self.n_ctx:
                return  # no room left for another whole call
            out: list[int] = []
            processors = (
                LogitsProcessorList([ClosingBias(self._closing, len(context), closing_bias)])
                if closing_bias
                else None
            )
            for token in self.llm.generate(
                context, temp=0.0, grammar=LlamaGrammar.from_string(grammar), logits_processor=processors
            ):
                if stop.is_set() or token in self._eog_set or len(out) >= max_tokens:
                    break
                out.append(token)
            body = bytes(self.llm.detokenize(out)).decode("utf-8", errors="replace")
            try:
                call = json.loads(body)
            except ValueError:
                return  # cut off by max_tokens or stopped: nothing usable in this call
            yield call["name"], json.dumps(call["arguments"], ensure_ascii=False), len(out)
            context = context + out + self.call_close
            if n + 1 >= limit or stop.is_set():
                return
            if self.call_probability(context) < 0.5:
                return
            context = context + self.call_open

    def stream_text(
        self,
        tokens: list[int],
        *,
        max_tokens: int,
        temperature: float,
        ban_call_start: bool,
        stop: threading.Event,
        generated: list[int] | None = None,
    ) -> Iterator[tuple[str, int, str]]:
        """Generate a text answer; yields `(piece, tokens so far, finish reason)`.

        With `ban_call_start` the decision not to call has been made for the first token: it may
        not open a call, begin to spell its opening, start the template's markup or end the turn.
        If the model opens a `<tool_call>` later, after some prose, the text ends there with the
        finish reason `"tool_calls"`. The tokens produced are appended to `generated` when given.
        """
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        context = list(tokens)
        out = generated if generated is not None else []
        if ban_call_start:
            probs = self._next_probabilities(context)
            probs[self._no_answer_start] = 0.0
            probs[self._eog] = 0.0
            first = int(probs.argmax()) if temperature <= 0 else self._sample(probs, temperature)
            out.append(first)
            yield decoder.decode(bytes(self.llm.detokenize([first]))), len(out), "stop"
            context.append(first)
        reason = "stop"
        for token in self.llm.generate(context, temp=temperature, repeat_penalty=1.0):
            if stop.is_set() or token in self._eog_set:
                break
            if ban_call_start and token == self._open_id:
                reason = "tool_calls"
                break
            if len(out) >= max_tokens:
                reason = "length"
                break
            out.append(token)
            yield decoder.decode(bytes(self.llm.detokenize([token]))), len(out), reason
        yield decoder.decode(b"", final=True), len(out), reason

    @staticmethod
    def _sample(probs: Any, temperature: float) -> int:
        weights = np.power(probs, 1.0 / temperature)
        weights /= weights.sum()
        return int(np.random.default_rng().choice(len(weights), p=weights))
