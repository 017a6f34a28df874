"""The policy-update experiment's ablations (run from a checkout of 0941b4e with policy_update.diff applied):
`python ablate.py VARIANT SCORED_SWEEP WARM_SWEEP...`, VARIANT one of
  nofirst  - without the run-wide baseline for a problem's first evaluation
  nopull   - without the pull towards the reference weights
  famD     - without per-kernel evidence; a kernel the warm start did not measure judged by the prior except its family
  famDnopull - famD without the pull
  old      - nothing changed (run it on a clean 0941b4e: the committed policy)
Prints, per seed SEED_FROM..SEED_TO-1 (default 0-2), the geomean best speedup and the problems with a candidate under the bar (one round of 4
proposals per problem in waves of 32, as studies.wave_replay)."""
import sys
from pathlib import Path

import search.policy as P
from search import warm_start
from search.backends.replay import ReplayBackend
from studies.wave_replay import replay_table_search

variant, scored, warm_files = sys.argv[1], sys.argv[2], sys.argv[3:]
update = P.Policy.update
if variant in ("nopull", "famDnopull"):
    P.REFERENCE_PULL = 0.0
if variant == "nofirst":
    def update_without_first(self, problem, cand, reward):
        run_baseline, had = self.run_baseline, problem.key in self.baselines
        if not had:
            self.run_baseline = None
        update(self, problem, cand, reward)
        if not had and run_baseline is not None:
            self.run_baseline = (1 - P.RUN_BASELINE_DECAY) * run_baseline + P.RUN_BASELINE_DECAY * reward
    P.Policy.update = update_without_first
if variant in ("famD", "famDnopull"):
    def update_without_evidence(self, problem, cand, reward):
        fitted = self.fitted_configs
        update(self, problem, cand, reward)
        self.fitted_configs = fitted

    def judged_by_family(self, candidate):
        if self.fitted_configs is None or candidate.config in self.fitted_configs:
            return self.weights
        return {**self.prior, "family": self.weights["family"]}
    P.Policy.update = update_without_evidence
    P.Policy.judged_by = judged_by_family
backend = ReplayBackend(Path(scored))
warm = warm_start.load([Path(w) for w in warm_files])
problems = [p for p in backend.measured_problems("nt", "fp16") if p.m * p.n * p.k < 2 ** 32]
for seed in range(int(__import__("os").environ.get("SEED_FROM", 0)), int(__import__("os").environ.get("SEED_TO", 3))):
    r = replay_table_search(backend, problems, warm, seed, 4, 4, 32)
    print(variant, seed, round(r["geomean_best"], 3), r["found_under_bar"], flush=True)
