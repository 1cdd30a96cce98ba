"""Load on `azlib serve` (the embedded model, in this process, on 127.0.0.1): ordinary chat requests from
concurrent clients, alone and beside one large request (n samples x many tokens) sent just before them, with
the server's turns as configured and with turns as large as the large request (one generate call per request,
the simplest scheduler). Prints requests/s and p50/p95 latency of the ordinary requests per case.

    .venv/bin/python benchmarks/serve_load.py [--clients 16] [--requests 2] [--large-n 16] [--large-tokens 256]
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx

from azlib.models import make_backend
from azlib.models.serve import BatchingServer
from azlib.settings import ServeLimits

QUESTION = [{"role": "user", "content": "What is 12 + 7?"}]
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"  # the model counts on: the large request uses (nearly) all its tokens


def ordinary_load(url: str, clients: int, per_client: int, tokens: int) -> tuple[float, list[float], int]:
    """(wall seconds, latencies of the answered requests, failures) for clients x per_client requests."""
    client = httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(max_connections=clients))
    body = {"model": "smol", "messages": QUESTION, "max_tokens": tokens}

    def one_client(_) -> list[float | None]:
        latencies = []
        for _ in range(per_client):
            started = time.perf_counter()
            ok = client.post("/chat/completions", json=body).status_code == 200
            latencies.append(time.perf_counter() - started if ok else None)
        return latencies

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [s for latencies in pool.map(one_client, range(clients)) for s in latencies]
    wall = time.perf_counter() - started
    client.close()
    return wall, [s for s in results if s is not None], sum(s is None for s in results)


def send_large(url: str, n: int, tokens: int) -> socket.socket:
    """The large request on a raw socket, so it can be abandoned (closed) whether or not it was answered."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    body = json.dumps({"model": "smol", "prompt": COUNTING, "n": n, "max_tokens": tokens, "temperature": 1.0}).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def case(backend, limits: ServeLimits, args, large: bool) -> str:
    with BatchingServer(backend, "smol", limits=limits) as server:
        ordinary_load(server.url, 2, 1, 2)  # warm-up
        sent = time.perf_counter()
        sock = send_large(server.url, args.large_n, args.large_tokens) if large else None
        time.sleep(0.2 if large else 0)
        wall, latencies, failed = ordinary_load(server.url, args.clients, args.requests, args.tokens)
        note = ""
        if sock is not None:
            answered = bool(select.select([sock], [], [], 0)[0])
            note = (f"; large {'answered' if answered else 'still running'} after {time.perf_counter() - sent:.1f} "
                    f"s, {server.stats['tokens']} tokens generated in all")
            sock.close()
    cuts = statistics.quantiles(latencies, n=20)  # 5% steps: [9] is the median, [18] the 95th percentile
    return (f"{len(latencies)} ordinary answered ({failed} failed) in {wall:.1f} s = {len(latencies) / wall:.2f} "
            f"req/s, latency p50 {cuts[9]:.1f} s, p95 {cuts[18]:.1f} s{note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent ordinary clients")
    parser.add_argument("--requests", type=int, default=2, help="requests per ordinary client, one after another")
    parser.add_argument("--tokens", type=int, default=8, help="max_tokens of an ordinary request")
    parser.add_argument("--large-n", type=int, default=ServeLimits.max_n, help="n of the large request")
    parser.add_argument("--large-tokens", type=int, default=256, help="max_tokens of the large request")
    args = parser.parse_args()

    backend = make_backend("hf")
    fair = ServeLimits()
    whole = replace(fair, turn_rows=args.large_n, turn_tokens=args.large_tokens)
    print(f"{args.clients} clients x {args.requests} chat requests of <= {args.tokens} tokens; large request: "
          f"n {args.large_n} x {args.large_tokens} tokens; turns of {fair.turn_rows} rows x {fair.turn_tokens} tokens")
    print("alone:                           ", case(backend, fair, args, large=False))
    print("beside the large one, in turns:  ", case(backend, fair, args, large=True))
    print("beside the large one, whole:     ", case(backend, whole, args, large=True))


if __name__ == "__main__":
    main()
