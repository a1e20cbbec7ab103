"""``Llama``: small language models with llama-cpp-python's API.

``create_completion`` and ``create_chat_completion`` return the dicts llama-cpp-python
returns (OpenAI's shapes: ``text_completion`` / ``chat.completion`` objects, or an
iterator of ``*.chunk`` objects with ``stream=True``), with the same defaults
(completion: T 0.8, 16 tokens; chat: T 0.2, up to the context), the same sampler
settings (top-k, top-p, min-p, repeat / presence / frequency penalties, seed, stop) and
the same context rules (``n_ctx`` positions for prompt + reply; 0: the model's own).

Where the two differ, on purpose:

- no model hub: ``model_path`` is a name lucent knows (``smollm2``, ``gemma3``), a
  ``.gguf`` file, a ``lucent train`` run or a Hugging Face GPT-2 folder;
- ``logprobs=True`` in a chat gives the chosen tokens' log-probabilities even without
  ``top_logprobs`` (as OpenAI does; llama-cpp-python then gives none);
- options lucent does not implement (grammars, logit bias, mirostat, tools, …) are
  refused by name when set, never ignored.

Every call makes its own KV cache, so threads may share one ``Llama``.
"""

from __future__ import annotations

import random
import json
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from lucent import _lucent

__all__ = ["Llama"]

# Options of llama-cpp-python that lucent does not implement, with their "off" value.
_UNSUPPORTED_OFF = {
    "suffix": None,
    "typical_p": 1.0,
    "tfs_z": 1.0,
    "mirostat_mode": 0,
    "grammar": None,
    "logits_processor": None,
    "stopping_criteria": None,
    "functions": None,
    "function_call": None,
}


def _logit_bias(logit_bias: Optional[Dict[Any, float]]) -> List[Any]:
    """llama-cpp-python's ``logit_bias`` (token id → bias, ids as ints or strings) as
    ``[(id, bias), …]``: added to the logits before anything else; -100 bans."""
    if not logit_bias:
        return []
    if not isinstance(logit_bias, dict):
        raise ValueError(f"logit_bias must be a dict from token ids to biases, got {logit_bias!r}")
    return [(int(k), float(v)) for k, v in logit_bias.items()]


def _constraint(response_format: Optional[Dict[str, Any]]) -> Optional[Any]:
    """``response_format`` as lucent's constraint ``(kind, text)``: llama-cpp-python's
    ``{"type": "json_object"}`` (any object) or ``{"type": "json_object", "schema":
    {...}}``, and OpenAI's ``{"type": "json_schema", "json_schema": {"schema": {...}}}``;
    ``{"type": "text"}`` or None: free text."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return ("json_object", "") if schema is None else ("json_schema", json.dumps(schema))
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema is None:
            raise ValueError('response_format json_schema needs {"json_schema": {"schema": {...}}}')
        return ("json_schema", json.dumps(schema))
    raise ValueError(f'response_format type must be "text", "json_object" or "json_schema", got {response_format!r}')


def _tools(tools: Optional[List[Dict[str, Any]]]) -> List[Any]:
    """OpenAI's ``tools`` (``[{"type": "function", "function": {"name", "description",
    "parameters"}}]``) as lucent's ``[(name, description, parameters JSON), …]``."""
    out = []
    for i, t in enumerate(tools or []):
        f = t.get("function") if isinstance(t, dict) else None
        if not isinstance(f, dict) or t.get("type", "function") != "function":
            raise ValueError(f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., "parameters": {{...}}}}}}')
        if not isinstance(f.get("name"), str):
            raise ValueError(f"tools[{i}].function.name: a tool needs a name")
        out.append((f["name"], f.get("description"), json.dumps(f.get("parameters") or {"type": "object"})))
    return out


def _tool_choice(tool_choice: Any) -> Any:
    """``tool_choice`` as ``(choice, function name)``."""
    if tool_choice is None:
        return ("auto", None)
    if isinstance(tool_choice, str):
        return (tool_choice, None)
    if isinstance(tool_choice, dict) and isinstance((tool_choice.get("function") or {}).get("name"), str):
        return ("function", tool_choice["function"]["name"])
    raise ValueError(f'tool_choice must be "auto", "none", "required" or {{"type": "function", "function": {{"name": ...}}}}, got {tool_choice!r}')


def _refuse_unsupported(options: Dict[str, Any]) -> None:
    for name, value in options.items():
        if name in ("mirostat_tau", "mirostat_eta"):
            continue  # only read by mirostat, which must be off
        if name not in _UNSUPPORTED_OFF:
            raise TypeError(f"unexpected argument {name!r}")
        if value != _UNSUPPORTED_OFF[name]:
            raise ValueError(f"{name}={value!r} is not supported by lucent; leave it at {_UNSUPPORTED_OFF[name]!r}")


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="ignore")


class Llama:
    """A decoder model, as ``llama_cpp.Llama``.

    ``n_ctx``: positions for prompt and reply together (0: the model's context);
    ``n_threads``: kernel threads of a runtime of this model's own (``None``: lucent's
    default runtime); ``seed``: the default seed (``-1`` or ``None``: a fresh one per call).
    Other llama.cpp settings (``n_gpu_layers``, ``n_batch``, ``use_mmap``, …) are
    accepted and have no effect: lucent runs on the CPU and maps weights itself.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        seed: Optional[int] = -1,
        verbose: bool = True,
        chat_format: Optional[str] = None,
        logits_all: bool = False,
        **llama_cpp_settings: Any,
    ) -> None:
        if chat_format is not None:
            raise ValueError(
                f"chat_format={chat_format!r}: lucent uses the chat template stored with the model"
            )
        self.model_path = model_path
        self.verbose = verbose
        self._gen = _lucent.Generator(model_path, n_threads)
        if n_ctx < 0:
            raise ValueError(f"n_ctx must be >= 0 (0: the model's context), got {n_ctx}")
        self._n_ctx = self._gen.n_ctx if n_ctx == 0 else min(n_ctx, self._gen.n_ctx)
        self._seed = None if seed is None or seed < 0 else seed
        self._ignored_settings = dict(llama_cpp_settings)

    # -- what the model is ---------------------------------------------------------------

    def n_ctx(self) -> int:
        """Positions for prompt and reply together."""
        return self._n_ctx

    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self._gen.n_vocab

    def n_embd(self) -> int:
        """Model width d."""
        return self._gen.n_embd

    # -- tokens --------------------------------------------------------------------------

    def tokenize(self, text: Union[bytes, str], add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of UTF-8 ``text`` (BOS first if ``add_bos`` and the model wants it;
        special-token text parsed with ``special``)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return self._gen.tokenize(text, add_bos, special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        """The bytes of ``tokens`` (special tokens as their text only with ``special``)."""
        return self._gen.detokenize(list(tokens), special)

    # -- generation ----------------------------------------------------------------------

    def _seed_for(self, seed: Optional[int]) -> int:
        if seed is not None and seed >= 0:
            return int(seed)
        if self._seed is not None:
            return self._seed
        return random.randrange(2**32)

    def _budget(self, prompt_tokens: int, max_tokens: Optional[int]) -> int:
        """llama-cpp-python's rule: the prompt must leave room; None or <= 0 means up to
        the context; the reply is cut to fit the context."""
        if prompt_tokens >= self._n_ctx:
            raise ValueError(f"Requested tokens ({prompt_tokens}) exceed context window of {self._n_ctx}")
        room = self._n_ctx - prompt_tokens
        if max_tokens is None or max_tokens <= 0:
            return room
        return min(max_tokens, room)

    def _token_str(self, token: int) -> str:
        return _text(self._gen.detokenize([token], False))

    def _completion_logprobs(self, text_offset: int, steps) -> Dict[str, Any]:
        """llama-cpp-python's ``CompletionLogprobs`` of generated tokens: each token's
        text, offset, log-probability and its top alternatives (the chosen one
        included)."""
        tokens, offsets, token_logprobs, top_logprobs = [], [], [], []
        offset = text_offset
        for token, logprob, top in steps:
            s = self._token_str(token)
            tokens.append(s)
            offsets.append(offset)
            offset += len(s)
            token_logprobs.append(float(logprob))
            alternatives = {self._token_str(i): float(lp) for i, lp in top}
            alternatives[s] = float(logprob)
            top_logprobs.append(alternatives)
        return {
            "tokens": tokens,
            "text_offset": offsets,
            "token_logprobs": token_logprobs,
            "top_logprobs": top_logprobs,
        }

    def _run(self, prompt_ids: List[int], stream: bool, logprobs: Optional[int], sampling: Dict[str, Any]):
        max_tokens = self._budget(len(prompt_ids), sampling.pop("max_tokens"))
        stop = sampling.pop("stop")
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        seed = self._seed_for(sampling.pop("seed"))
        args = dict(sampling, max_tokens=max_tokens, stop=stop, seed=seed, logprobs=logprobs)
        if stream:
            return self._gen.stream(prompt_ids, **args)
        return self._gen.generate(prompt_ids, **args)

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        model: Optional[str] = None,
        logit_bias: Optional[Dict[Any, float]] = None,
        **unsupported: Any,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Continue ``prompt`` (text, or token ids): a ``text_completion`` dict, or with
        ``stream=True`` an iterator of ``text_completion`` chunks (the last one carries
        ``finish_reason``). ``logprobs=k``: each token's log-probability and the k most
        likely alternatives. ``logit_bias``: token id → bias added to its logit (-100
        bans it)."""
        _refuse_unsupported(dict(unsupported, suffix=suffix, typical_p=typical_p))
        if isinstance(prompt, str):
            prompt_ids = self._gen.prompt_ids(prompt) if prompt else []
            prompt_text = prompt
        else:
            prompt_ids = [int(t) for t in prompt]
            prompt_text = _text(self._gen.detokenize(prompt_ids, False))
        if not prompt_ids:
            raise ValueError("the prompt is empty; give some text to continue")
        sampling = dict(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, seed=seed, max_tokens=max_tokens, stop=stop or [],
            logit_bias=_logit_bias(logit_bias),
        )
        cid = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        name = model if model is not None else self.model_path
        head = prompt_text if echo else ""
        result = self._run(prompt_ids, stream, logprobs, sampling)
        if stream:
            return self._completion_chunks(result, cid, created, name, head, len(prompt_text), logprobs)
        text = head + result["text"]
        lp = None
        if logprobs is not None:
            lp = self._completion_logprobs(len(prompt_text), result["logprobs"])
        return {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": name,
            "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": result["finish_reason"]}],
            "usage": {
                "prompt_tokens": len(result["prompt_ids"]),
                "completion_tokens": len(result["ids"]),
                "total_tokens": len(result["prompt_ids"]) + len(result["ids"]),
            },
        }

    __call__ = create_completion

    def _completion_chunks(self, pieces, cid, created, name, head, text_offset, logprobs):
        def chunk(text, lp, finish):
            return {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": name,
                "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": finish}],
            }

        if head:
            yield chunk(head, None, None)
        offset = text_offset
        for piece in pieces:
            if "finish_reason" in piece:
                yield chunk("", None, piece["finish_reason"])
                return
            lp = None
            if logprobs is not None:
                lp = self._completion_logprobs(offset, piece["logprobs"])
            offset += len(piece["text"])
            yield chunk(piece["text"], lp, None)

    def create_chat_completion(
        self,
        messages: List[Dict[str, Any]],
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        seed: Optional[int] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        model: Optional[str] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        logit_bias: Optional[Dict[Any, float]] = None,
        response_format: Optional[Dict[str, Any]] = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Optional[Union[str, Dict[str, Any]]] = None,
        parallel_tool_calls: bool = True,
        **unsupported: Any,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """The assistant's reply to ``messages`` (``[{"role", "content"}, …]``) through
        the model's chat template: a ``chat.completion`` dict, or with ``stream=True``
        an iterator of ``chat.completion.chunk`` dicts (first the role, then the
        content, last the ``finish_reason``). ``response_format``: ``{"type":
        "json_object"}`` (any JSON object; with ``"schema": {...}``, valid under that
        schema, as llama-cpp-python) or OpenAI's ``{"type": "json_schema",
        "json_schema": {"schema": {...}}}``: the reply is constrained to it.
        ``logit_bias``: token id → bias added to its logit (-100 bans it).
        ``tools`` / ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or
        ``{"type": "function", "function": {"name": ...}}``) / ``parallel_tool_calls``:
        OpenAI's function calling in lucent's generic form (docs/tool-calls.md); a reply
        that is calls has ``message.tool_calls`` (``[{"id", "type": "function",
        "function": {"name", "arguments"}}]``), ``content`` None and ``finish_reason``
        ``"tool_calls"``. Messages may carry an assistant's ``tool_calls`` and
        ``{"role": "tool", "content"}`` results. A stream with tools sends the reply
        once it is complete (text or calls, then the ``finish_reason``)."""
        _refuse_unsupported(dict(unsupported, typical_p=typical_p))
        lucent_tools = _tools(tools)
        choice, function = _tool_choice(tool_choice)
        if tool_choice is not None and not lucent_tools:
            raise ValueError("tool_choice needs tools")
        offered = bool(lucent_tools) and choice != "none"
        if offered and response_format is not None and response_format.get("type") != "text":
            raise ValueError("response_format cannot be combined with tools the reply may call")
        pairs = []
        for i, m in enumerate(messages):
            content = m.get("content")
            if m.get("role") == "tool":
                pairs.append(_lucent.tool_result(content if isinstance(content, str) else json.dumps(content)))
                continue
            if m.get("role") == "assistant" and m.get("tool_calls"):
                calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
                pairs.append(_lucent.tool_assistant(content or "", calls))
                continue
            if isinstance(content, list):  # OpenAI content parts: keep the text ones
                parts = []
                for part in content:
                    if part.get("type") != "text":
                        raise ValueError(f"message {i}: content part of type {part.get('type')!r}; lucent reads text")
                    parts.append(part["text"])
                content = "".join(parts)
            if "role" not in m or not isinstance(content, str):
                raise ValueError(f"message {i} needs a 'role' and a text 'content', got {m!r}")
            pairs.append((m["role"], content))
        constraint = _constraint(response_format)
        if offered:
            pairs = _lucent.tool_messages(pairs, lucent_tools)
            constraint = ("lark", _lucent.tool_grammar(lucent_tools, choice, function, parallel_tool_calls))
        prompt_ids = self._gen.chat_ids(pairs)
        n_top = (top_logprobs or 0) if logprobs else None
        sampling = dict(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, seed=seed, max_tokens=max_tokens, stop=stop or [],
            logit_bias=_logit_bias(logit_bias), constraint=constraint,
        )
        cid = f"chatcmpl-{uuid.uuid4()}"
        created = int(time.time())
        name = model if model is not None else self.model_path
        result = self._run(prompt_ids, stream and not offered, n_top, sampling)
        if stream and not offered:
            return self._chat_chunks(result, cid, created, name, n_top)
        message = {"role": "assistant", "content": result["text"]}
        finish = result["finish_reason"]
        if offered:
            calls = _lucent.tool_parse(result["text"], lucent_tools)
            if calls is not None:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": _lucent.tool_call_id(), "type": "function", "function": {"name": n, "arguments": a}}
                    for n, a in calls]}
                finish = "tool_calls" if finish == "stop" else finish
        if stream:
            return self._tool_chunks(message, finish, cid, created, name)
        lp = None
        if n_top is not None:
            lp = self._chat_logprobs(self._completion_logprobs(0, result["logprobs"]))
        return {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": lp,
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": len(result["prompt_ids"]),
                "completion_tokens": len(result["ids"]),
                "total_tokens": len(result["prompt_ids"]) + len(result["ids"]),
            },
        }

    @staticmethod
    def _chat_logprobs(lp: Dict[str, Any]) -> Dict[str, Any]:
        """``CompletionLogprobs`` → ``ChatCompletionLogprobs`` (as llama-cpp-python)."""
        return {
            "content": [
                {
                    "token": token,
                    "bytes": None,
                    "logprob": logprob,
                    "top_logprobs": [{"token": t, "logprob": p, "bytes": None} for t, p in top.items()],
                }
                for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])
            ],
            "refusal": None,
        }

    @staticmethod
    def _tool_chunks(message, finish, cid, created, name):
        """A finished reply with tools offered as ``chat.completion.chunk`` dicts: the
        role, then the content or each call (with its ``index``), then the finish."""
        def chunk(delta, finish_reason):
            return {
                "id": cid,
                "model": name,
                "created": created,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }

        yield chunk({"role": "assistant"}, None)
        if message.get("tool_calls"):
            for k, c in enumerate(message["tool_calls"]):
                yield chunk({"tool_calls": [dict(c, index=k)]}, None)
        else:
            yield chunk({"content": message["content"]}, None)
        yield chunk({}, finish)

    def _chat_chunks(self, pieces, cid, created, name, n_top):
        def chunk(delta, lp, finish):
            return {
                "id": cid,
                "model": name,
                "created": created,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}],
            }

        yield chunk({"role": "assistant"}, None, None)
        for piece in pieces:
            if "finish_reason" in piece:
                yield chunk({}, None, piece["finish_reason"])
                return
            lp = None
            if n_top is not None:
                lp = self._chat_logprobs(self._completion_logprobs(0, piece["logprobs"]))
            yield chunk({"content": piece["text"]}, lp, None)
