"""What constrained decoding costs: the same greedy requests to one `lucent serve`, free
and with a `json_schema` that their free answer satisfies, rounds interleaved.

Each request is a /v1/completions prompt asking the model to copy a small JSON document
(`{"words": [...]}`, a stretch of a text of its own; one worked example, then the
document, then "Output:" and a newline, so the answer starts at the brace); the schema
is that document's shape (an object with one array of strings). Calibration first: each prompt alone,
constrained, with room to finish; then free with max_tokens = the constrained answer's
token count. Greedy and allowed at every step, the constrained tokens are the free
ones, so both generate the same tokens: the script checks the texts and token counts
and stops if any differ (a comparison of unequal work means nothing).

Timed rounds, at each client count C: the first C prompts at once (C = 1: one request
alone), free then constrained (the order alternating round by round). Reported per C:
generated tokens / wall time (from the first request sent to the last answer), median
over rounds, and the ratio constrained / free; the cost is 1 - ratio.

Standard library only. Usage:
  python3 bench_constrain.py --server http://127.0.0.1:8094 --clients 1 8 --rounds 5
"""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = (
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world. It is a way I have of driving off the spleen and regulating the circulation. Whenever "
    "I find myself growing grim about the mouth; whenever it is a damp, drizzly November in my soul; whenever "
    "I find myself involuntarily pausing before coffin warehouses, and bringing up the rear of every funeral I "
    "meet; and especially whenever my hypos get such an upper hand of me, that it requires a strong moral "
    "principle to prevent me from deliberately stepping into the street, and methodically knocking people's "
    "hats off, then, I account it high time to get to sea as soon as I can."
).split()

SCHEMA = {
    "type": "object",
    "properties": {"words": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 64}},
    "required": ["words"],
    "additionalProperties": False,
}


def prompt(k, n_words):
    """Prompt k: copy a document of n_words words starting at word 7k."""
    words = [WORDS[(7 * k + j) % len(WORDS)].strip(".,;") for j in range(n_words)]
    doc = json.dumps({"words": words})
    return f"Copy the JSON document exactly.\nInput:\n{doc}\nOutput:\n{doc}\n\nInput:\n{doc}\nOutput:\n"


def complete(url, model, text, max_tokens, constrained):
    body = {"model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "words", "schema": SCHEMA}}
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise SystemExit(f"{url}: {r.status} {data}")
    ch = data["choices"][0]
    return {"text": ch["text"], "tokens": data["usage"]["completion_tokens"], "finish": ch["finish_reason"]}


def batch(url, model, reqs, constrained):
    """All (prompt, max_tokens) of `reqs` at once: (tokens/s, answers)."""
    out = [None] * len(reqs)

    def go(i):
        out[i] = complete(url, model, reqs[i][0], reqs[i][1], constrained)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(reqs))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if any(o is None for o in out):
        raise SystemExit("a request failed")
    return sum(o["tokens"] for o in out) / wall, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="http://127.0.0.1:8094")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--words", type=int, default=24, help="words per document (about 3 tokens each)")
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    a = ap.parse_args()
    most = max(a.clients)
    texts = [prompt(k, a.words) for k in range(most)]
    # Calibration: the constrained answer alone, then the free one of the same length.
    reqs = []
    for t in texts:
        c = complete(a.server, a.model, t, 4 * a.words + 32, True)
        if c["finish"] != "stop":
            raise SystemExit(f"the constrained answer did not finish: {c}")
        f = complete(a.server, a.model, t, c["tokens"], False)
        if (f["text"], f["tokens"]) != (c["text"], c["tokens"]):
            raise SystemExit(f"free and constrained answers differ:\n free {f}\n constrained {c}")
        reqs.append((t, c["tokens"]))
    print(
        f"{most} prompts, {sum(n for _, n in reqs)} tokens out in all; free = constrained on each",
        file=sys.stderr,
        flush=True,
    )
    rows = []
    for n in a.clients:
        rates = {"free": [], "constrained": []}
        for r in range(a.rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            for constrained in order:
                rate, out = batch(a.server, a.model, reqs[:n], constrained)
                for (t, k), o in zip(reqs[:n], out):
                    if o["tokens"] != k:
                        raise SystemExit(f"a timed answer had {o['tokens']} tokens, not {k}")
                rates["constrained" if constrained else "free"].append(rate)
        free, con = statistics.median(rates["free"]), statistics.median(rates["constrained"])
        print(
            f"{n:>3} clients: free {free:7.1f} tok/s ({' '.join(f'{x:.1f}' for x in rates['free'])})  "
            f"constrained {con:7.1f} tok/s ({' '.join(f'{x:.1f}' for x in rates['constrained'])})  "
            f"ratio {con / free:.3f} (cost {100 * (1 - con / free):.1f} %)",
            flush=True,
        )
        rows.append(
            {
                "clients": n,
                "tokens_per_request": [k for _, k in reqs[:n]],
                "free_tok_s": free,
                "constrained_tok_s": con,
                "ratio": con / free,
                "free_rounds": rates["free"],
                "constrained_rounds": rates["constrained"],
            }
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "rounds": a.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
