"""The burst gate: the service's wait-or-burst step and spend accounting, over the BurstLedger port.

Owns gathering the numbers the pure core decides on, and remembering what it must (docs/burst.md):

- `begin_pass` takes the scheduling pass's queue order, the fleet summaries and (lazily) the placed
  jobs; `predictions()` replays them once per pass (broker.burst.wait_prediction) over the run times the
  ledger holds.
- `decide` is asked by the service when placement would send a job that allows bursting to a cloud
  cluster (nothing on-prem fits now). It builds the cloud offers from the placement verdicts (price and
  spot from the cluster's traits, the reclaim rate from settings.burst.pools), the tenant's budget left
  (broker.burst.spend over the ledger's runs and the tenant's cloud jobs still running) and the job's last
  verdict (hysteresis), and returns broker.burst.policy.decide's answer; `changed` says whether the
  verdict differs from the last one, so the job's events get one line per change, not one per pass.
- `job_ended` is told when a placed job's attempt ends (finished, failed, or disrupted back to the
  queue): a successful run's time becomes a sample of its shape key, and a run on a priced cluster
  becomes a spend Run (price x GPUs x run time; run time from when the broker saw the pods running to
  when it saw the Job end). Counted once per attempt.
- `budget_stops` says which cloud jobs to stop because their tenant's hard budget is spent
  (broker.burst.spend.hard_budget_stops over the settled runs and what the running ones have run up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from broker import telemetry
from broker.burst import policy, scaleup
from broker.burst.policy import BurstDecision, CloudOffer, Verdict
from broker.burst.settings import BurstSettings
from broker.burst.spend import (
    BudgetStop,
    Period,
    Run,
    RunningCost,
    TenantSpend,
    hard_budget_stops,
    period_start,
    spend_by_tenant,
)
from broker.burst.wait_prediction import Prediction, RunTimeModel, predict_queue, shape_key
from broker.core.model import ClusterSummary, ClusterTraits, JobRecord, JobState, Placement, Tier
from broker.core.ports import BurstLedger
from broker.scheduler.placement import ClusterVerdict

__all__ = ["BurstGate", "GateAnswer"]


@dataclass(frozen=True)
class GateAnswer:
    decision: BurstDecision
    changed: bool  # the verdict differs from the job's last one (or it is the first)
    prediction: Prediction | None


class BurstGate:
    def __init__(self, ledger: BurstLedger, settings: BurstSettings | None = None) -> None:
        self.ledger = ledger
        self.settings = settings or BurstSettings()
        self._now = 0.0
        self._queue: Sequence[JobRecord] = ()
        self._active_of: Callable[[], list[JobRecord]] = list
        self._active: list[JobRecord] | None = None
        self._summaries: Sequence[ClusterSummary] = ()
        self._fenced: Sequence[ClusterSummary] = ()
        self._model: RunTimeModel | None = None
        self._predictions: dict[str, Prediction] | None = None
        self._pass_spend: dict[str, TenantSpend] | None = None  # this pass's, with its bursts committed

    # ------------------------------------------------------------------ scale-up headroom

    def grow(self, summary: ClusterSummary) -> ClusterSummary:
        """The summary with its pool's scale-up headroom (broker.burst.scaleup), for the placer's cache."""
        pool = self.settings.pools.get(summary.cluster)
        if pool is None or pool.product is None or pool.max_nodes <= 0:
            return summary
        return scaleup.grow(summary, pool.product, pool.gpus_per_node, pool.max_nodes)

    def provisioning_delay(self, cluster: str) -> float:
        pool = self.settings.pools.get(cluster)
        return pool.provisioning_delay_seconds if pool is not None else 0.0

    def _ready_in(self, verdict: ClusterVerdict, request: JobRecord, summary: ClusterSummary | None) -> float:
        """0 when the job fits the cluster's nodes now; the pool's delay when it needs nodes added."""
        pool = self.settings.pools.get(verdict.cluster)
        option = verdict.option
        if pool is None or option is None or option.capacity is None or summary is None:
            return 0.0
        added = summary.autoscale_headroom.get(option.product, 0)
        req = request.request
        if scaleup.needs_scale_up(option.capacity, added, pool.gpus_per_node, option.units_per_pod, req.pods):
            return pool.provisioning_delay_seconds
        return 0.0

    # ------------------------------------------------------------------ one pass

    def begin_pass(
        self,
        now: float,
        queue: Sequence[JobRecord],
        active: Callable[[], list[JobRecord]],
        summaries: Sequence[ClusterSummary],
        fenced: Sequence[ClusterSummary] = (),
    ) -> None:
        """What this pass knows; nothing is read until a decision or a prediction needs it. `fenced`:
        the clusters not offered now (predictions name them: wait_prediction.predict_queue)."""
        self._now, self._queue, self._active_of, self._summaries = now, queue, active, summaries
        self._fenced = fenced
        self._active = None
        self._model = None
        self._predictions = None
        self._pass_spend = None

    def model(self) -> RunTimeModel:
        if self._model is None:
            self._model = RunTimeModel(
                self.ledger.run_times(), self.settings.default_run_seconds, self.settings.simulation_speed
            )
        return self._model

    def active(self) -> list[JobRecord]:
        if self._active is None:
            self._active = self._active_of()
        return self._active

    def predictions(self) -> dict[str, Prediction]:
        if self._predictions is None:
            self._predictions = predict_queue(
                self._queue, self.active(), self._summaries, self.model(), self._now, fenced=self._fenced
            )
        return self._predictions

    def predict(
        self,
        now: float,
        queue: Sequence[JobRecord],
        active: list[JobRecord],
        summaries: Sequence[ClusterSummary],
        fenced: Sequence[ClusterSummary] = (),
    ) -> dict[str, Prediction]:
        """Predictions outside a pass (the job view, explain), from the run times the ledger holds now."""
        model = RunTimeModel(
            self.ledger.run_times(), self.settings.default_run_seconds, self.settings.simulation_speed
        )
        return predict_queue(queue, active, summaries, model, now, fenced=fenced)

    def spend_now(
        self, now: float, active: list[JobRecord], traits: Mapping[str, ClusterTraits]
    ) -> dict[str, TenantSpend]:
        """Spend outside a pass (GET /v1/spend)."""
        model = RunTimeModel(
            self.ledger.run_times(), self.settings.default_run_seconds, self.settings.simulation_speed
        )
        return self._spend(now, active, model, traits, with_savings=True)

    def spend(self, traits: Mapping[str, ClusterTraits]) -> dict[str, TenantSpend]:
        """Each tenant's spend this period, with its cloud jobs still running as committed cost."""
        return self._spend(self._now, self.active(), self.model(), traits)

    def _spend(
        self,
        now: float,
        active: list[JobRecord],
        model: RunTimeModel,
        traits: Mapping[str, ClusterTraits],
        with_savings: bool = False,
    ) -> dict[str, TenantSpend]:
        budgets = self.settings.budgets()
        committed: dict[str, float] = {}
        for r, where, price, started in _priced(active, traits):
            # what it has run up in the tenant's period so far and is expected to run still (a long run
            # is likely a long one), reckoned with the mean, as costs add up (expected_for_cost)
            budget = budgets.get(r.request.tenant)
            since = period_start(now, budget.period if budget else Period.MONTH)
            ran = max(0.0, now - started) if started is not None else 0.0
            ran_in_period = max(0.0, now - max(started, since)) if started is not None else 0.0
            run = ran_in_period + model.remaining(r.request, where.product, ran, for_cost=True)
            committed[r.request.tenant] = (
                committed.get(r.request.tenant, 0.0) + price * where.total_units * run / 3600
            )
        return self._settled(now, committed, with_savings)

    def _settled(
        self, now: float, committed: Mapping[str, float] | None = None, with_savings: bool = False
    ) -> dict[str, TenantSpend]:
        """Each tenant's spend this period from the ledger's runs (and `committed` beside it); with
        with_savings, what burst-back saved it (read only for the spend view, not by the passes)."""
        budgets = self.settings.budgets()
        periods = {Period.MONTH} | {b.period for b in budgets.values()}
        earliest = min(period_start(now, p) for p in periods)
        savings = self.ledger.savings(earliest) if with_savings else ()
        return spend_by_tenant(self.ledger.runs(earliest), budgets, now, committed, savings=savings)

    def decide(
        self,
        record: JobRecord,
        verdicts: Iterable[ClusterVerdict],
        traits: Mapping[str, ClusterTraits],
        placeable: Callable[[str], ClusterSummary | None] | None = None,
    ) -> GateAnswer:
        """`placeable` gives the cluster as the placer saw it (with its scale-up headroom)."""
        req = record.request
        offers = []
        for v in verdicts:
            if v.tier is not Tier.CLOUD or not v.feasible or v.option is None:
                continue
            t = traits.get(v.cluster)
            pool = self.settings.pools.get(v.cluster)
            offers.append(
                CloudOffer(
                    cluster=v.cluster,
                    product=v.option.product,
                    price_per_gpu_hour=_price(traits, v.cluster, v.option.product),
                    ready_in_seconds=self._ready_in(v, record, placeable(v.cluster) if placeable else None),
                    spot=t is not None and t.spot,
                    interruptions_per_hour=pool.interruptions_per_hour if pool else 0.0,
                )
            )
        prediction = self.predictions().get(record.id)
        model = self.model()
        product = offers[0].product if offers else (prediction.product if prediction else "")
        run = model.expected_for_cost(req, product or "")
        if self._pass_spend is None:
            self._pass_spend = self.spend(traits)
        spend = self._pass_spend
        tenant = spend.get(req.tenant)
        previous_raw = self.ledger.verdict(record.id)
        previous = Verdict(previous_raw) if previous_raw in (Verdict.WAIT, Verdict.BURST) else None
        decision = policy.decide(
            allow_burst=req.allow_burst,
            gpus=max(1, req.total_gpus),
            waited_seconds=max(0.0, self._now - record.created_at),
            predicted_wait_seconds=None if prediction is None else prediction.wait_seconds,
            max_wait_seconds=self.settings.max_wait(req.tenant, req.max_wait_seconds),
            run_seconds=run.seconds,
            offers=offers,
            budget_left=None if tenant is None else tenant.left,
            previous=previous,
            unpredicted="on-prem wait not predicted (MIG jobs are not modelled)"
            if req.wants_mig
            else "no on-prem start (no on-prem cluster can hold it)",
        )
        changed = decision.verdict is not previous
        if decision.burst and decision.cost is not None and tenant is not None:
            # the next decision of this pass sees this burst's expected cost as committed
            spend[req.tenant] = dataclasses.replace(tenant, committed=tenant.committed + decision.cost)
        if changed:
            self.ledger.set_verdict(record.id, str(decision.verdict))
            telemetry.burst_decisions.labels(str(decision.verdict)).inc()
        return GateAnswer(decision, changed, prediction)

    # ------------------------------------------------------------------ hard budgets

    @property
    def has_hard_budgets(self) -> bool:
        return any(b.hard for b in self.settings.budgets().values())

    def budget_stops(
        self, now: float, active: Sequence[JobRecord], traits: Mapping[str, ClusterTraits]
    ) -> list[BudgetStop]:
        """The tenants whose hard budget is spent now, with their jobs on priced clusters to stop (those
        not running yet too: they would start adding to a spent budget)."""
        if not self.has_hard_budgets:
            return []
        running = [
            RunningCost(r.id, r.request.tenant, price * max(1, where.total_units), started)
            for r, where, price, started in _priced(active, traits)
        ]
        return hard_budget_stops(self._settled(now), running, now)  # settled runs + what they run up

    # ------------------------------------------------------------------ a run ended

    def job_ended(
        self, record: JobRecord, state: JobState, now: float, traits: Mapping[str, ClusterTraits]
    ) -> Run | None:
        """Account the attempt that just ended (`record` as it was before: placed, with its start)."""
        self.ledger.forget(record.id)
        where = record.placement
        if where is None or record.cluster is None:
            return None
        if record.state is JobState.PLACED and not state.terminal:
            return None  # its create failed: it never ran
        started = record.updated_at  # when it was seen ADMITTED/RUNNING (or placed, if it ended first)
        seconds = max(0.0, now - started)
        if state is JobState.SUCCEEDED and not where.mig_profile:
            self.ledger.add_run_time(shape_key(record.request, where.product), seconds)
        price = _price(traits, record.cluster, where.product)
        if price <= 0:
            return None
        t = traits.get(record.cluster)
        run = Run(
            job_id=record.id,
            attempt=record.attempt,
            tenant=record.request.tenant,
            cluster=record.cluster,
            product=where.product,
            gpus=max(1, where.total_units),
            price_per_gpu_hour=price,
            started_at=started,
            ended_at=now,
            spot=t is not None and t.spot,
        )
        if self.ledger.add_run(run):
            telemetry.cloud_spend.labels(run.tenant, run.cluster).inc(run.cost)
            telemetry.cloud_gpu_seconds.labels(run.tenant, run.cluster).inc(run.gpus * run.seconds)
        return run


def _priced(
    active: Iterable[JobRecord], traits: Mapping[str, ClusterTraits]
) -> Iterator[tuple[JobRecord, Placement, float, float | None]]:
    """The placed jobs on priced clusters: (record, placement, price per GPU-hour, when it started: when
    the broker saw it ADMITTED or RUNNING, as job_ended times a run; None while PLACED)."""
    for r in active:
        where = r.placement
        if where is None or r.cluster is None:
            continue
        price = _price(traits, r.cluster, where.product)
        if price > 0:
            yield r, where, price, r.updated_at if r.state in _STARTED else None


_STARTED = (JobState.ADMITTED, JobState.RUNNING)  # a run is paid for from then (job_ended)


def _price(traits: Mapping[str, ClusterTraits], cluster: str, product: str) -> float:
    t = traits.get(cluster)
    return 0.0 if t is None else float(t.price_per_gpu_hour.get(product, 0.0))
