#!/usr/bin/env python3
"""Write the small-scale DP-SFT specs (paper 002, Tables 1-6 and a k sweep) beside the GLUE
baselines in experiments/glue/small/, so that experiments/glue/run.sh runs them like any other
method (--methods dp_sft ...). Rerun after changing a setting here; the files are committed.

Every spec starts from the task's reheaded tiny-roberta (build/glue/models/TASK), trains stage 2
for the baselines' 200 steps of batch 32 (train.lr: chosen on validation by run.sh --select for
`dp_sft`, and reused by the other DP-SFT variants), and records k trajectory rows over 192
stage-1 steps (768 for the long-subspace row). Stage 1 uses the lr selected for the matching
baseline: Full-DP's (eps 4) for a private stage 1, non-private Full-tuning's for a public one.

Variants (file TASK-VARIANT.yaml, spec label in the tables):
  dp_sft          private stage 1, p1 = 1/2, joint accounting          (Tables 1-2; Table 3 at eps inf)
  dp_sft_p37      private stage 1, p1 = 3/7 (eps1 : eps2 = 3 : 4)     (Tables 1-2)
  dp_sft_public   public stage 1 on a disjoint 10 % of the training file (hash_split), stage 2 on
                  the other 90 %                                       (Tables 1-2)
  dp_sft_noisy    private stage 1, budget split eps1 = 3, eps2 = 1     (Table 6, eps 4 only)
  dp_sft_long     private stage 1 of 768 steps                        (Table 3, eps inf only)
  dp_sft_from_X   public stage 1 on task X's training set             (Tables 4-5, SST-2 <-> IMDB)
  dp_sft_kK       as dp_sft with k = K                                 (k sweep, SST-2 and IMDB)
  public_only     the control for dp_sft_public: non-private full fine-tuning (method sgd) on
                  the public 10 % alone, as its stage 1 trains (192 steps of batch 32 at the same
                  lr), no stage 2: what the public rows give without the private 90 %
Usage: experiments/glue/dp_sft_specs.py [--out DIR]   (default experiments/glue/small; the test
writes into a scratch directory and compares)
"""
import argparse
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--out", default=os.path.join(HERE, "small"))
OUT = ap.parse_args().out
D = "../shared/data"
TASKS = {
    "sst2": dict(name="SST-2", labels="['0', '1']", k=32, lr_dp="5.0e-4", lr_np="5.0e-4",
                 block=f"{{path: {D}/glue_sst2/train.tsv, text_column: sentence, label_column: label{{extra}}}}",
                 eval=f"{{path: {D}/glue_sst2/dev.tsv, text_column: sentence, label_column: label}}"),
    "imdb": dict(name="IMDB", labels="[negative, positive]", k=32, lr_dp="1.0e-4", lr_np="1.0e-4",
                 block=f"{{path: {D}/imdb_subset/imdb_2499_clean.csv, text_column: review, label_column: sentiment, rows: [0, 2000]{{extra}}}}",
                 eval=f"{{path: {D}/imdb_subset/imdb_2499_clean.csv, text_column: review, label_column: sentiment, rows: [2000, 2499]}}"),
    "qnli": dict(name="QNLI", labels="[entailment, not_entailment]", k=32, lr_dp="5.0e-4", lr_np="1.0e-4",
                 block=f"{{path: {D}/glue_samples/qnli/train.json, text_column: text_a, text_pair_column: text_b, label_column: label{{extra}}}}",
                 eval=f"{{path: {D}/glue_samples/qnli/dev.json, text_column: text_a, text_pair_column: text_b, label_column: label}}"),
    "mnli": dict(name="MNLI", labels="[entailment, neutral, contradiction]", k=64, delta="1.0e-6", lr_dp="1.0e-4", lr_np="2.0e-3",
                 block=f"{{path: {D}/glue_samples/mnli/train.json, text_column: text_a, text_pair_column: text_b, label_column: label{{extra}}}}",
                 eval=f"{{path: {D}/glue_samples/mnli/dev.json, text_column: text_a, text_pair_column: text_b, label_column: label}}"),
}
STAGE1_STEPS, LONG_STEPS = 192, 768
# SST-2 and IMDB label the same sentiment differently: a transfer run reads the source's labels
# as the target's.
LABEL_MAP = {("imdb", "sst2"): "{negative: '0', positive: '1'}",
             ("sst2", "imdb"): "{'0': negative, '1': positive}"}


def block(t, extra=""):
    return TASKS[t]["block"].replace("{extra}", extra)


def body(task, name, label, train, public=None):
    """The lines every spec shares, from its name to data.max_length."""
    t = TASKS[task]
    lines = [f"name: {name}", f"label: {label}", "seed: 0", "model:",
             f"  path: build/glue/models/{task}", "  peft: {kind: full, targets: [all]}", "data:",
             "  task: classification", f"  labels: {t['labels']}", f"  train: {train}"]
    if public:
        lines.append(f"  public: {public}")
    return lines + [f"  eval: {t['eval']}", "  max_length: 128"]


def train_block(steps, lr):
    return ["train:", f"  steps: {steps}", "  batch_size: 32", "  micro_batch_size: 32",
            "  optimizer: adamw", f"  lr: {lr}", "  warmup_ratio: 0.06"]


def write(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(path)


def spec(task, variant, label, what, source="private", split="0.5", budget="joint", k=None,
         steps=STAGE1_STEPS, public=None, train_extra="", eps_note="scripts/sweep.sh --eps sets it",
         stage1_task=None):
    t = TASKS[task]
    k = k or t["k"]
    s1 = TASKS[stage1_task or task]  # whose data stage 1 trains on
    lr1 = s1["lr_np"] if source == "public" else s1["lr_dp"]
    lines = [
        f"# DP-SFT (paper 002), small scale: {t['name']}, {what}",
        "# Written by experiments/glue/dp_sft_specs.py (its docstring has every variant); run with",
        f"# experiments/glue/run.sh --methods {variant} (build/glue/models/{task} is the reheaded",
        "# models/tiny-roberta). train.* is stage 2; its lr comes from experiments/glue/selected_lr.tsv",
        "# (chosen on a validation split of the training rows for dp_sft). Stage 1's lr is the one",
        f"# selected for {'non-private Full-tuning' if source == 'public' else 'Full-DP at epsilon 4'} on {s1['name']}.",
    ]
    lines += body(task, f"glue-{task}-{variant.replace('_', '-')}", label, block(task, train_extra),
                  public)
    lines += [
        "privacy:",
        f"  epsilon: 4                         # {eps_note}",
        f"  delta: {t.get('delta', '1.0e-5')}                     # the baselines' (the paper's)",
        "  clip_norm: 10.0",
    ] + train_block(200, "5.0e-4") + [
        "method:",
        "  name: dp-sft",
        f"  k: {k}",
        f"  source: {source}",
    ]
    if source == "private":
        lines += [f"  split: {split}", f"  budget: {budget}"]
    lines += [f"  stage1: {{steps: {steps}, lr: {lr1}, clip_norm: 10.0}}",
              "output:", "  save_model: false", ""]
    write(os.path.join(OUT, f"{task}-{variant}.yaml"), lines)


for task, t in TASKS.items():
    k = t["k"]
    spec(task, "dp_sft", "DP-SFT (private, p1 1/2)",
         f"a private stage 1 (DP full fine-tuning, {STAGE1_STEPS} steps, k = {k} trajectory rows) with "
         "p1 = 1/2 of the budget, joint accounting (Tables 1-2; at epsilon inf the non-private "
         "short-subspace row of Table 3)")
    spec(task, "dp_sft_p37", "DP-SFT (private, p1 3/7)",
         "a private stage 1 with p1 = 3/7 (the authors' code sets eps1 = 3, eps2 = 4: the same "
         "ratio), joint accounting (Tables 1-2)", split="0.4285714285714286")
    spec(task, "dp_sft_public", "DP-SFT (public 10 %)",
         "a public stage 1 on the 10 % of the training file that hash_split sets aside; stage 2 "
         "trains privately on the other 90 % (no text is in both), with the whole budget "
         "(Tables 1-2)", source="public", train_extra=", hash_split: [0, 0.9]",
         public=block(task, ", hash_split: [0.9, 1]"))
    spec(task, "dp_sft_noisy", "DP-SFT (noisy, eps1 3 + eps2 1)",
         "the paper's noisy-trajectory ablation: a private stage 1 at eps1 = 3 and stage 2 at "
         "eps2 = 1 of a total 4, composed as the paper does (budget split, Theorem 3) (Table 6; "
         "run at epsilon 4 only)", split="0.75", budget="split", eps_note="Table 6: 4 only")
    spec(task, "dp_sft_long", f"DP-SFT (private, {LONG_STEPS}-step subspace)",
         f"the long-trajectory subspace: stage 1 of {LONG_STEPS} steps (4x dp_sft's) (Table 3; run "
         "at epsilon inf only, where both stages are non-private)", steps=LONG_STEPS,
         eps_note="Table 3: inf only")


def public_only(task):
    t = TASKS[task]
    lines = [
        f"# DP-SFT (paper 002) control, small scale: {t['name']}, the public 10 % alone: non-private",
        "# full fine-tuning on the 10 % of the training file that hash_split sets aside (dp_sft_public's",
        f"# data.public), {STAGE1_STEPS} steps of batch 32 at the lr of dp_sft_public's stage 1 (non-private",
        "# Full-tuning's; experiments/glue/selected_lr.tsv), no private data: what dp_sft_public's",
        "# stage 2 on the private 90 % adds to its stage 1. Non-private (method sgd): run once per seed.",
        "# Written by experiments/glue/dp_sft_specs.py; run with experiments/glue/run.sh --methods public_only.",
    ]
    lines += body(task, f"glue-{task}-public-only", "Public 10 % only (non-private)",
                  block(task, ", hash_split: [0.9, 1]"))
    lines += ["privacy:", "  epsilon: .inf", f"  delta: {t.get('delta', '1.0e-5')}",
              "  clip_norm: 10.0"]
    lines += train_block(STAGE1_STEPS, t["lr_np"])
    lines += ["method:", "  name: sgd", "output:", "  save_model: false", ""]
    write(os.path.join(OUT, f"{task}-public_only.yaml"), lines)


for task in TASKS:
    public_only(task)
for src, dst in (("imdb", "sst2"), ("sst2", "imdb")):
    spec(dst, f"dp_sft_from_{src}", f"DP-SFT (subspace from {TASKS[src]['name']})",
         f"subspace transfer {TASKS[src]['name']} -> {TASKS[dst]['name']}: a public stage 1 on "
         f"{TASKS[src]['name']}'s training set (its labels read as {TASKS[dst]['name']}'s), stage 2 "
         f"on {TASKS[dst]['name']} with the whole budget (Tables 4-5: epsilon inf and 4)",
         source="public",
         public=block(src, f", label_map: {LABEL_MAP[(src, dst)]}"), stage1_task=src,
         eps_note="Tables 4-5: inf and 4")
for task in ("sst2", "imdb"):
    for k in (8, 16, 64):
        spec(task, f"dp_sft_k{k}", f"DP-SFT (private, p1 1/2, k {k})",
             f"the k sweep: as dp_sft with k = {k} trajectory rows (run at epsilon 4)", k=k,
             eps_note="k sweep: 4")
