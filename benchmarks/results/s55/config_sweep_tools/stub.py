"""A minimal OpenAI-compatible stub on loopback (GET /v1/models lists "stub"; every chat completion
answers with the tsp_construct template), so `coevolve run` of a context-only method with an
[endpoint] gets past every check without loading an engine. Usage: stub.py PORT"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
sys.path.insert(0, "/tmp/sweep")
from tasks.tsp_construct import TEMPLATE

GOOD = json.dumps({"id": "c", "object": "chat.completion", "model": "stub",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": f"```python\n{TEMPLATE}\n```"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, body):
        b = body.encode(); self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        self._send(json.dumps({"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "stub"}]}))
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0)); self.rfile.read(n); self._send(GOOD)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
