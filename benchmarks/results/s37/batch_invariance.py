import sys
from coevolve.engine.base import Sampling
from coevolve.engine.vllm_engine import Engine
engine = Engine(dtype=sys.argv[1])
print("dtype", engine.dtype)
facts = " ".join(f"Item {i} weighs {i * 7 % 13} kg." for i in range(70))
long = [[{"role": "user", "content": f"{facts} Which item is the heaviest?"}]]
greedy = Sampling(temperature=0.0, max_tokens=24)
a = engine.chat(long, greedy)[0].text
t = [c.text for c in engine.chat(long * 2, greedy)]
t4 = [c.text for c in engine.chat(long * 4, greedy)]
print("greedy alone", repr(a)); print("greedy x2", t); print("greedy x4", t4)
s = Sampling(temperature=1.0, max_tokens=24)
for seeds in ([1, 2], [3, 4], [5, 6]):
    alone = [engine.chat(long, s, seeds=[x])[0].text for x in seeds]
    tog = [c.text for c in engine.chat(long * 2, s, seeds=seeds)]
    tog2 = [c.text for c in engine.chat(long * 2, s, seeds=seeds)]
    print(seeds, "alone==together", alone == tog, "together reproducible", tog == tog2, [x[:30] for x in alone], [x[:30] for x in tog])
engine.close()
