"""A small OpenAI-compatible server on 127.0.0.1 with scripted behaviour, for the tests
of the endpoint backend and of ``ragguard annotate``."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# the next-token distribution the fake server reports, by whether the passage answers
ANSWERS = {"Paris": 0.7, "NO": 0.2, " NO": 0.05, "No": 0.05}  # p(NO-RESPONSE) = 0.25
ABSTAINS = {"NO": 0.6, " NO": 0.1, "N": 0.05, "Berlin": 0.25}  # p(NO-RESPONSE) = 0.75


class FakeServer:
    """An OpenAI-compatible server with scripted behaviour; counts what it receives."""

    def __init__(self) -> None:
        self.mode = "ok"  # ok | no_logprobs | bad_request | echo_auth | answer
        self.fail_first = 0  # answer the first N requests with 503
        self.delay = 0.0
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body,
                                            "auth": self.headers.get("Authorization")})  # fmt: skip
                    n = len(server.requests)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay)
                    status, reply = server.reply(n, self.path, body, self.headers)
                finally:
                    with server.lock:
                        server.in_flight -= 1
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status == 503:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on this request (an interrupted run)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def reply(
        self, n: int, path: str, body: dict[str, Any], headers: Any
    ) -> tuple[int, dict[str, Any]]:
        if n <= self.fail_first:
            return 503, {"error": {"message": "overloaded"}}
        if self.mode == "bad_request":
            return 400, {"error": {"message": "model 'nope' does not exist"}}
        if self.mode == "echo_auth":  # what careless servers and proxies do
            auth = headers.get("Authorization", "")
            key = auth.removeprefix("Bearer ")
            return 401, {"error": {"message": f"invalid key {key}", "api_key": key,
                                   "headers": {"Authorization": auth}}}  # fmt: skip
        if self.mode == "answer":  # a short answer: the passage's first year, else none
            passage = body["messages"][-1]["content"].split("Passage: ")[-1]
            year = re.search(r"\b\d{4}\b", passage)
            content = f"Answer: {year.group()}." if year else "None."
            return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}
        text = json.dumps(body)
        dist = ANSWERS if "Paris" in text else ABSTAINS
        top = sorted(dist.items(), key=lambda kv: -kv[1])
        if path.endswith("/chat/completions"):
            if body.get("max_tokens", 0) > 1:  # the judge
                document = text.split("Document: ")[-1].split("```")[0]
                grade = "A" if "Paris" in document else "B"
                content = json.dumps({"motivation": "m", "grade": grade})
                return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}
            choice: dict[str, Any] = {"index": 0, "message": {"content": top[0][0]}}
            if self.mode != "no_logprobs":
                alts = [{"token": t, "logprob": math.log(p)} for t, p in top]
                choice["logprobs"] = {"content": [{**alts[0], "top_logprobs": alts}]}
            else:
                choice["logprobs"] = None
            return 200, {"choices": [choice]}
        lp = {
            "tokens": [top[0][0]],
            "token_logprobs": [math.log(top[0][1])],
            "top_logprobs": [{t: math.log(p) for t, p in top}],
        }
        return 200, {"choices": [{"text": top[0][0], "logprobs": lp}]}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
