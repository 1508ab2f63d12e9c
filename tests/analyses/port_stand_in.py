"""A stand-in for the Nystromformer port's ``LRA/code`` folder: its files, call contracts and module-level loop
shape, at toy sizes (written for these tests; the real port is never needed here).

The loop holds the lines ``analyses.nystromformer_code.EDITS`` replaces; ``PORT_STOP_AT`` (an environment
variable) raises at a training step, as a kill would stop it.
"""

from __future__ import annotations

from pathlib import Path

LRA_CONFIG = '''
config = {"listops": {
    "model": {"embedding_dim": 8, "transformer_dim": 8, "head_dim": 4, "num_head": 2, "vocab_size": 32,
              "max_seq_len": 2000, "dropout_prob": 0.1, "attention_dropout": 0.1, "num_classes": 10},
    "training": {"batch_size": 4, "learning_rate": 0.01, "warmup": 2, "lr_decay": "linear", "weight_decay": 0,
                 "eval_frequency": 3, "num_train_steps": 9, "num_eval_steps": 2},
    "gpu_memory": {"softmax": 4},
    "extra_attn_config": {"softmax": {"attention_grad_checkpointing": True}},
}}
'''
ATTENTION = '''
import math
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class SoftmaxAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.drop_attn = nn.Dropout(p=config["attention_dropout"])

    def forward(self, Q, K, V, mask):
        dot = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]) - 1e6 * (1 - mask[:, None, None, :])
        return self.drop_attn(dot.softmax(-1)) @ V


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads, self.grad_checkpointing = config["num_head"], config["attention_grad_checkpointing"]
        self.qkv = nn.Linear(config["transformer_dim"], 3 * config["num_head"] * config["head_dim"])
        self.attn = SoftmaxAttention(config)

    def forward(self, X, mask):
        B, N, _ = X.shape
        q, k, v = self.qkv(X).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if self.grad_checkpointing:
            out = checkpoint(self.attn, q, k, v, mask, use_reentrant=True)
        else:
            out = self.attn(q, k, v, mask)
        return out.transpose(1, 2).reshape(B, N, -1)
'''
MODEL = '''
import torch
from torch import nn
from attention import Attention


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config["vocab_size"], config["embedding_dim"])
        self.pos = nn.Embedding(config["max_seq_len"], config["embedding_dim"])
        self.mha = Attention(config)
        self.drop = nn.Dropout(config["dropout_prob"])

    def forward(self, input_ids, mask):
        X = self.embed(input_ids) + self.pos.weight[: input_ids.shape[1]]
        return (X + self.drop(self.mha(X, mask))) * mask[:, :, None]
'''
MODEL_WRAPPER = '''
import torch
from torch import nn
from model import Model


class SCHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.linear = nn.Linear(config["transformer_dim"], config["num_classes"])

    def forward(self, tokens):
        return self.linear(tokens.mean(1))


class ModelForSC(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Model(config)
        self.seq_classifer = SCHead(config)

    def forward(self, input_ids_0, mask_0, label):
        scores = self.seq_classifer(self.model(input_ids_0, mask_0))
        loss = nn.functional.cross_entropy(scores, label, reduction="none")
        return {"loss": loss, "accu": (scores.argmax(-1) == label).float()}
'''
DATASET = '''
import pickle
import random
import torch
from torch.utils.data.dataset import Dataset


class LRADataset(Dataset):
    def __init__(self, file_path, endless):
        self.endless = endless
        with open(file_path, "rb") as f:
            self.examples = pickle.load(f)  # the stand-in's own test files
        random.shuffle(self.examples)
        self.curr_idx = 0

    def __len__(self):
        return 10**9 if self.endless else len(self.examples)

    def __getitem__(self, i):
        if self.endless:
            if self.curr_idx >= len(self.examples):
                random.shuffle(self.examples)
                self.curr_idx = 0
            i, self.curr_idx = self.curr_idx, self.curr_idx + 1
        ids = torch.tensor(self.examples[i]["input_ids_0"], dtype=torch.long)
        return {"input_ids_0": ids, "mask_0": (ids != 0).float(), "label": torch.tensor(self.examples[i]["label"])}
'''
RUN_TASKS = '''
import itertools, json, math, os, sys
import torch
from torch import nn
from torch.utils.data import DataLoader
import lra_config
from dataset import LRADataset
from model_wrapper import ModelForSC

task = sys.argv[sys.argv.index("--task") + 1]
attn_type = sys.argv[sys.argv.index("--model") + 1]
model_config = dict(lra_config.config[task]["model"], **lra_config.config[task]["extra_attn_config"][attn_type])
model_config["max_seq_len"] = int(2 ** math.ceil(math.log2(model_config["max_seq_len"])))
training_config = lra_config.config[task]["training"]
device_ids = list(range(torch.cuda.device_count()))
accumu_steps = max(training_config["batch_size"] // len(device_ids) // 4, 1)
model = ModelForSC(model_config)
model = model.cuda()
model = nn.DataParallel(model, device_ids = device_ids)
ds_iter = {
    "train": enumerate(DataLoader(LRADataset(f"../datasets/{task}.train.pickle", True), batch_size = 4)),
    "dev": enumerate(DataLoader(LRADataset(f"../datasets/{task}.dev.pickle", True), batch_size = 4)),
    "test": enumerate(DataLoader(LRADataset(f"../datasets/{task}.test.pickle", False), batch_size = 4,
                                 drop_last = True)),
}
optimizer = torch.optim.AdamW(model.parameters(), lr = training_config["learning_rate"])
lr_scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr = training_config["learning_rate"],
                                                   total_steps = training_config["num_train_steps"])
log_f_path = os.path.join("../logs/", f"{task}_{attn_type}_output.log")
log_f = open(log_f_path, "a+")
summary = {c: {"loss": [], "accu": [], "best_accu": 0, "component": c} for c in ["train", "dev", "test"]}

def step(component):
    _, batch = next(ds_iter[component])
    for key in batch:
        batch[key] = batch[key].cuda()
    if component == "train":
        optimizer.zero_grad()
        out = model(**batch)
        out["loss"].mean().backward()
        optimizer.step()
        lr_scheduler.step()
    else:
        with torch.no_grad():
            out = model(**batch)
    summary[component]["loss"].append(out["loss"].mean().item())
    summary[component]["accu"].append(out["accu"].mean().item())

def print_summary(s, save_if_improved, train_step_idx):
    row = {"component": s["component"], "train_step_idx": train_step_idx,
           "loss": round(sum(s["loss"]) / len(s["loss"]), 4), "accu": round(sum(s["accu"]) / len(s["accu"]), 4)}
    if row["accu"] > s["best_accu"]:
        s["best_accu"] = row["accu"]
        if save_if_improved:
            torch.save({"model_state_dict": model.module.state_dict()}, log_f_path.replace(".log", ".model"))
    log_f.write(json.dumps(row, sort_keys = True) + "\\n")
    log_f.flush()
    s["loss"], s["accu"] = [], []

stop_at = int(os.environ.get("PORT_STOP_AT", -1))
model.train()
for train_step_idx in range(training_config["num_train_steps"]):
    if train_step_idx == stop_at:
        raise SystemExit("stopped")
    step("train")
    if (train_step_idx + 1) % training_config["eval_frequency"] == 0:
        print_summary(summary["train"], False, train_step_idx)
        model.eval()
        for dev_step_idx in range(training_config["num_eval_steps"]):
            step("dev")
        print_summary(summary["dev"], True, train_step_idx)
        model.train()

model.module.load_state_dict(torch.load(log_f_path.replace(".log", ".model"))["model_state_dict"])
model.eval()
try:
    for test_step_idx in itertools.count():
        step("test")
except StopIteration:
    print_summary(summary["test"], False, train_step_idx)
'''
FILES = {"lra_config.py": LRA_CONFIG, "attention.py": ATTENTION, "model.py": MODEL,
         "model_wrapper.py": MODEL_WRAPPER, "dataset.py": DATASET, "run_tasks.py": RUN_TASKS}


def write_stand_in(folder: Path) -> Path:
    """The stand-in port's files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (folder / name).write_text(text.lstrip("\n"))
    return folder
