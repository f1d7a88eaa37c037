"""AdamW golden: three steps of torch.optim.AdamW on two parameters, one with weight decay
(a matrix) and one without (a norm gain), with a different learning rate each step.

Tensors: params/w (3,4), params/g (4) initial values; grads/<step>/w, grads/<step>/g the
gradients fed at each step; after/<step>/w, after/<step>/g the parameters after each step.
Metadata: lrs (JSON list), betas, eps, weight_decay.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def write_adamw_golden(outdir: str) -> str:
    from make_golden import write_golden  # the byte-stable writer every golden uses

    g = torch.Generator().manual_seed(2001)
    w = torch.randn(3, 4, generator=g, dtype=torch.float64).float()
    gain = (1 + 0.1 * torch.randn(4, generator=g, dtype=torch.float64)).float()
    lrs = [1e-2, 5e-3, 2e-2]
    betas, eps, wd = (0.9, 0.95), 1e-8, 0.1
    pw = torch.nn.Parameter(w.clone())
    pg = torch.nn.Parameter(gain.clone())
    opt = torch.optim.AdamW([{"params": [pw], "weight_decay": wd}, {"params": [pg], "weight_decay": 0.0}],
                            lr=lrs[0], betas=betas, eps=eps)
    tensors = {"params/w": w, "params/g": gain}
    for step, lr in enumerate(lrs):
        gw = torch.randn(3, 4, generator=g, dtype=torch.float64).float()
        gg = torch.randn(4, generator=g, dtype=torch.float64).float()
        for group in opt.param_groups:
            group["lr"] = lr
        pw.grad, pg.grad = gw.clone(), gg.clone()
        opt.step()
        tensors[f"grads/{step}/w"], tensors[f"grads/{step}/g"] = gw, gg
        tensors[f"after/{step}/w"] = pw.detach().clone()
        tensors[f"after/{step}/g"] = pg.detach().clone()
    cfg = {"lrs": lrs, "betas": list(betas), "eps": eps, "weight_decay": wd}
    return write_golden(outdir, "adamw", "tests/reference/golden_adamw.py", tensors, cfg)[0]

if __name__ == "__main__":
    print(write_adamw_golden(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "golden")))
