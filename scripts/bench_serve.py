"""Load generator for OpenAI-compatible servers (lucent serve, llama-server), side by side.

N clients start together; each sends one streaming /v1/completions request: a prompt of
exactly P tokens (token ids, a different stretch of the text for every client and round)
and T greedy tokens with ignore_eos, so every request generates exactly T tokens;
`cache_prompt: false` (llama-server's field; lucent keeps no prompt cache) so that no
server reuses an earlier prompt. With several servers, each round runs on every server in
turn, the order alternating round by round, so both see the same machine load.

Reports, per server and client count (medians over rounds, percentiles over all):

- aggregate generated tok/s: all clients' tokens / wall time from the first request
  sent to the last token received;
- time to first token (p50, p99 over all requests): request sent → first token;
- inter-token latency (p50, p99 over all gaps): between consecutive tokens of a request;
- exactness: round 0's requests at N clients whose text equals the same prompt run alone
  on the same server (greedy: a batch-invariant server gives N / N), and the solo texts
  that equal the first server's.

With `--shared-prefix S`, every request is one shared S-token prefix (a system prompt,
the same for every client and round) followed by its own P-token question, sent with
`cache_prompt: true`: the prompt-cache benchmark (lucent with its cache, lucent with
`--cache-ram 0`, llama-server with its slots' prompt cache). The solo runs come first,
so every server has seen the prefix before the timed rounds.

Standard library only. Usage:
  python3 bench_serve.py --server lucent=http://127.0.0.1:8091 \
      --server llama-server=http://127.0.0.1:8092 --clients 1 4 8 16 --rounds 3
"""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

TEXT = (
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world. It is a way I have of driving off the spleen and regulating the circulation. Whenever "
    "I find myself growing grim about the mouth; whenever it is a damp, drizzly November in my soul; whenever "
    "I find myself involuntarily pausing before coffin warehouses, and bringing up the rear of every funeral I "
    "meet; and especially whenever my hypos get such an upper hand of me, that it requires a strong moral "
    "principle to prevent me from deliberately stepping into the street, and methodically knocking people's "
    "hats off, then, I account it high time to get to sea as soon as I can. "
)


def post(url, path, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c, c.getresponse()


def tokenize(url, model, repeat=12):
    c, r = post(url, "/tokenize", {"content": TEXT * repeat, "model": model})
    ids = json.loads(r.read())["tokens"]
    c.close()
    return [t if isinstance(t, int) else t["id"] for t in ids]


# Whether requests ask llama-server to reuse its slots' prompt caches (--shared-prefix).
CACHE_PROMPT = False


def one_request(url, model, prompt, max_tokens, out, slot):
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "cache_prompt": CACHE_PROMPT,
        "stream": True,
    }
    t0 = time.perf_counter()
    c, r = post(url, "/v1/completions", body)
    if r.status != 200:
        out[slot] = {"error": f"{r.status} {r.read()[:200]!r}"}
        return
    times, text = [], []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            out[slot] = {"error": str(chunk["error"])}
            return
        for ch in chunk.get("choices", []):
            if ch.get("text"):
                times.append(time.perf_counter())
                text.append(ch["text"])
    c.close()
    out[slot] = {"sent": t0, "times": times, "text": "".join(text)}


def run(url, model, prompts, max_tokens):
    """All `prompts` at once; returns (tok/s, TTFTs, ITLs, texts)."""
    out = [None] * len(prompts)
    threads = [
        threading.Thread(target=one_request, args=(url, model, p, max_tokens, out, i))
        for i, p in enumerate(prompts)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o["error"] for o in out if o is None or "error" in o]
    if errors:
        raise SystemExit(f"{url}, {len(prompts)} clients: {errors[0]}")
    end = max(o["times"][-1] for o in out)
    # Tokens: each server sends one chunk per token here (greedy, ignore_eos); a token
    # whose bytes end mid-character may be held back and joined to the next chunk, so
    # count max_tokens per request.
    tokens = max_tokens * len(prompts)
    ttft = [o["times"][0] - o["sent"] for o in out]
    itl = []
    for o in out:
        n = len(o["times"])
        if n > 1:
            gaps = [b - a for a, b in zip(o["times"], o["times"][1:])]
            # Chunks that joined tokens: spread their gap over the tokens they carry.
            scale = (n - 1) / max(1, max_tokens - 1)
            itl.extend(g * scale for g in gaps)
    return tokens / (end - t0), ttft, itl, [o["text"] for o in out]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True, help="LABEL=URL (repeatable)")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--shared-prefix",
        type=int,
        default=0,
        metavar="S",
        help="every prompt starts with the same S tokens (then its own --prompt-tokens); cache_prompt: true",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    a = ap.parse_args()
    global CACHE_PROMPT
    CACHE_PROMPT = a.shared_prefix > 0
    servers = [s.split("=", 1) for s in a.server]
    most = max(a.clients)
    if a.shared_prefix > 0:
        # The shared prefix first; the questions from the text after it (37 tokens apart).
        ids = tokenize(servers[0][1], a.model, repeat=12 + a.shared_prefix // 100)
        shared, rest = ids[: a.shared_prefix], ids[a.shared_prefix :]
        span = max(1, len(rest) - a.prompt_tokens)
        prompts = [
            shared + [rest[(k * 37) % span + j] for j in range(a.prompt_tokens)]
            for k in range(a.rounds * most)
        ]
    else:
        ids = tokenize(servers[0][1], a.model)
        span = max(1, len(ids) - a.prompt_tokens)
        # Prompt i of round r: a stretch of the text of its own (37 tokens apart).
        prompts = [
            [ids[(k * 37) % span + j] for j in range(a.prompt_tokens)] for k in range(a.rounds * most)
        ]

    # Each of round 0's prompts alone, per server: the texts batched runs must equal.
    solo = {}
    for label, url in servers:
        solo[label] = [run(url, a.model, [p], a.max_tokens)[3][0] for p in prompts[:most]]
        print(f"{label}: {most} solo runs done", file=sys.stderr, flush=True)

    stats = {(label, n): {"rates": [], "ttft": [], "itl": [], "exact": None} for label, _ in servers for n in a.clients}
    for n in a.clients:
        for r in range(a.rounds):
            order = servers if r % 2 == 0 else servers[::-1]
            for label, url in order:
                batch = prompts[r * most : r * most + n]
                rate, ttft, itl, texts = run(url, a.model, batch, a.max_tokens)
                s = stats[(label, n)]
                s["rates"].append(rate)
                s["ttft"] += ttft
                s["itl"] += itl
                if r == 0:
                    s["exact"] = sum(t == solo[label][i] for i, t in enumerate(texts))
        for label, _ in servers:
            s = stats[(label, n)]
            print(
                f"{label:>14} {n:>3} clients: {statistics.median(s['rates']):7.1f} tok/s "
                f"({' '.join(f'{x:.1f}' for x in s['rates'])})  "
                f"TTFT p50 {1000 * pct(s['ttft'], 50):7.1f} ms p99 {1000 * pct(s['ttft'], 99):7.1f} ms  "
                f"ITL p50 {1000 * pct(s['itl'], 50):6.1f} ms p99 {1000 * pct(s['itl'], 99):6.1f} ms  "
                f"= solo {s['exact']}/{n}",
                flush=True,
            )
    first = servers[0][0]
    for label, _ in servers[1:]:
        same = sum(x == y for x, y in zip(solo[label], solo[first]))
        print(f"solo texts: {label} = {first} on {same}/{most} prompts", flush=True)
    if a.json:
        rows = [
            {
                "label": label,
                "clients": n,
                "tok_s": statistics.median(s["rates"]),
                "tok_s_rounds": s["rates"],
                "ttft_p50_ms": 1000 * pct(s["ttft"], 50),
                "ttft_p99_ms": 1000 * pct(s["ttft"], 99),
                "itl_p50_ms": 1000 * pct(s["itl"], 50),
                "itl_p99_ms": 1000 * pct(s["itl"], 99),
                "equal_to_solo": s["exact"],
            }
            for (label, n), s in stats.items()
        ]
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "solo": solo, "shared_prefix": a.shared_prefix}, f, indent=1)


if __name__ == "__main__":
    main()
