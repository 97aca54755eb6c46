import time, torch
torch.set_num_threads(2)
# SmolLM2-135M: hidden 576, intermediate 1536, 30 layers, 9 heads (q 576), 3 kv heads (k,v 192), vocab 49152 (tied head)
shapes = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)] * 30 + [(49152, 576)]
W = [torch.randn(o, i) for o, i in shapes]
print("params M", sum(w.numel() for w in W) / 1e6)
for b in (1, 8):
    xs = {i: torch.randn(b, i) for i in (576, 1536)}
    for _ in range(3):
        t = time.perf_counter()
        for w in W:
            torch.nn.functional.linear(xs[w.shape[1]], w)
        dt = time.perf_counter() - t
    print(f"batch {b}: {dt*1000:.1f} ms per forward (linear layers only)")
