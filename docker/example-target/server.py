"""An example downstream service behind the kafka-dlq sidecar.

POST /events with a delivery event as JSON. Answers:
  200  stored (idempotent on X-Record-Id)
  400  malformed JSON                     -> permanent: dead-lettered at once
  422  unknown status                     -> permanent
  503  about 1 in 10 calls (a flaky DB)   -> transient: retried with backoff
"""
import json
import random
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KNOWN = {"picked_up", "in_transit", "out_for_delivery", "delivered"}
STORED = {}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        record_id = self.headers.get("X-Record-Id", "")
        try:
            event = json.loads(body)
        except ValueError as e:
            return self.answer(400, f"malformed JSON: {e}")
        if event.get("status") not in KNOWN:
            return self.answer(422, f"unknown status {event.get('status')!r}")
        if random.random() < 0.1:
            return self.answer(503, "database busy")
        STORED[record_id] = event
        return self.answer(200, "stored")

    def do_GET(self):
        self.answer(200, f"{len(STORED)} events stored")

    def answer(self, status, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
