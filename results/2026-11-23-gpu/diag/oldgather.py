"""Does the pre-fix all_gather_bytes (CPU outputs, CUDA input) work under NCCL? And the fixed one?"""
import torch
import torch.distributed as dist

dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
t = torch.get_rng_state()
try:
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.to(dev))
    torch.cuda.synchronize()
    print("old all_gather_bytes code: ok, equal", torch.equal(out[0], t))
except Exception as err:
    print("old all_gather_bytes code fails:", type(err).__name__, str(err).splitlines()[0][:200])
from mtkit import distributed as dm

dm.Dist.enabled = property(lambda self: True)
got = dm.all_gather_bytes(t, dm.Dist(0, 1, 0, dev))
print("new all_gather_bytes: ok, equal", torch.equal(got[0], t), got[0].device)
dist.destroy_process_group()
