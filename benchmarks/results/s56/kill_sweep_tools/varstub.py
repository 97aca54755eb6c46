"""A deterministic, varied OpenAI-compatible stub (no engine) for kill/resume tests.

Reply = pure function of (request seed, messages). Programs vary (valid with a continuous
parameter, raising, syntax error, invalid decisions) so the archive actually evolves.
Analysts (Trace2Skill) get ADD patches. Usage: python varstub.py PORT [DELAY_S]
Logs every request (seed, sha of messages) to stderr-free file /tmp/ks/stub_PORT.log.
"""
import hashlib
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
DELAY = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
LOG = open(f"/tmp/ks/stub_{PORT}.log", "a", buffering=1)

TSP = {
    "near": "    d = distance_matrix[current_node][unvisited_nodes]\n    return unvisited_nodes[np.argmin(d)]\n",
    "mix": ("    d = distance_matrix[current_node][unvisited_nodes]\n"
            "    back = distance_matrix[destination_node][unvisited_nodes]\n"
            "    return unvisited_nodes[np.argmin(d - {k} * back)]\n"),
    "mix2": ("    d = distance_matrix[current_node][unvisited_nodes]\n"
             "    back = distance_matrix[destination_node][unvisited_nodes]\n"
             "    return unvisited_nodes[np.argmin(d + {k} * back)]\n"),
    "first": "    return unvisited_nodes[0]\n",
    "far": "    d = distance_matrix[current_node][unvisited_nodes]\n    return unvisited_nodes[np.argmax(d)]\n",
    "nameerr": "    return unvisited_nodes[np.argmin(distances)]\n",
    "syntax": "    return unvisited_nodes[np.argmin(\n",
    "invalid": "    return current_node\n",
}
ACO = {
    "pow": "    return 1.0 / distance_matrix ** {p}\n",
    "exp": "    return np.exp(-{k} * distance_matrix / distance_matrix.mean())\n",
    "inv": "    return 1.0 / distance_matrix\n",
    "nameerr": "    return 1.0 / dist\n",
    "syntax": "    return (1.0 / distance_matrix\n",
    "shape": "    return np.ones(3)\n",
}


def program(kind: str, h: int) -> str:
    table = TSP if kind == "tsp" else ACO
    names = list(table)
    weights = [4, 4, 3, 1, 1, 2, 1, 1] if kind == "tsp" else [5, 3, 1, 2, 1, 1]
    pick = h % sum(weights)
    for name, w in zip(names, weights):
        if pick < w:
            break
        pick -= w
    k = round(0.05 + ((h >> 8) % 40) / 50, 2)
    p = round(0.5 + ((h >> 16) % 30) / 10, 1)
    body = table[name].format(k=k, p=p)
    head = ("def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
            if kind == "tsp" else "def heuristics(distance_matrix):\n")
    return f"{{variant {name} k={k} p={p}}}\n```python\nimport numpy as np\n\n{head}{body}```\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "stub"} for m in ("stub", "stub2")]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        msgs = json.dumps(body.get("messages"), sort_keys=True)
        seed = body.get("seed")
        h = int.from_bytes(hashlib.sha256(f"{seed}|{msgs}".encode()).digest()[:8], "little")
        text_all = msgs
        kind = "tsp" if "select_next_node" in text_all else "aco"
        analyst = "ADD" in text_all and ("EDIT" in text_all or "DELETE" in text_all)
        condense = "Merge these rules" in text_all
        if condense:
            content = "- keep the tour short\n- prefer near cities"
        elif analyst:
            rules = ["prefer the nearest unvisited city", "define every name you use",
                     "return one of the unvisited nodes", "avoid division by zero"]
            content = f"ADD Rules: {rules[h % 4]}\nADD Pitfalls: {rules[(h >> 4) % 4]}"
        else:
            content = program(kind, h)
        LOG.write(json.dumps({"t": time.time(), "seed": seed, "h": h % 10**8, "analyst": analyst}) + "\n")
        if DELAY:
            time.sleep(DELAY)
        self.send({"id": "c", "object": "chat.completion", "model": "stub",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": len(msgs) // 4, "completion_tokens": len(content) // 4,
                             "total_tokens": len(msgs) // 4 + len(content) // 4}})


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
