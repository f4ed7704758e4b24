"""The ``Trainer``: build (process group → mesh → model and parallelisms → optimizer → data →
held-out evaluation → checkpoints → metrics and progress), one ``step`` at a time (evaluating when
due), ``close`` (final checkpoint work, status, teardown). ``train.py`` runs it in a worker process."""

from __future__ import annotations

import logging
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from phalanx_common.contract import (
    DEFAULT_TERMINATION_LOG,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_URI,
    ENV_METRICS_PORT,
    ENV_PROGRESS_PORT,
    ENV_TERMINATION_LOG,
    PROGRESS_PHASE_EXPORTING,
    PROGRESS_PHASE_PREPARING,
    ProgressKey,
    StartupPhase,
)
from phalanx_common.layout import check_layout
from phalanx_runtime.components.checkpoint import CheckpointConfig, Checkpointer
from phalanx_runtime.components.data import DataLoader, make_source
from phalanx_runtime.components.evaluation import PERPLEXITY, build_evaluator, eval_metrics
from phalanx_runtime.components.loss import CountedLoss
from phalanx_runtime.components.metrics import (
    MetricsLogger,
    device_peak_flops,
    metric_labels,
    metrics_log_path,
)
from phalanx_runtime.components.optimizer import build_lr_scheduler, build_optimizer
from phalanx_runtime.components.progress import (
    Progress,
    ProgressServer,
    reporting_phase,
    write_final,
)
from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.distributed.clip import clip_grad_norm_
from phalanx_runtime.distributed.data_parallel import grad_sync
from phalanx_runtime.distributed.parallel_dims import ParallelDims
from phalanx_runtime.distributed.pipeline import build_pipeline
from phalanx_runtime.distributed.precision import autocast, compute_precision
from phalanx_runtime.distributed.process_group import device_for_rank, init_distributed
from phalanx_runtime.env import ENV_DEBUG_FULL_STATE
from phalanx_runtime.lifetime import EXIT_PREEMPTED
from phalanx_runtime.models.build import build_model_parts
from phalanx_runtime.models.entrypoint import ModelContext
from phalanx_runtime.models.huggingface.export import export_in_job
from phalanx_runtime.models.huggingface.provenance import model_files_writer, resumed_base_problems
from phalanx_runtime.models.transformer.lora import adapters_only_checkpoints
from phalanx_runtime.preflight import run_preflight
from phalanx_runtime.startup import StartupTimeline

log = logging.getLogger("phalanx_runtime")

PREPARE_TIMEOUT_S = 6 * 3600  # ranks wait this long for rank 0's data.prepare


@dataclass
class TrainResult:
    steps: int
    world_size: int
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    tokens_per_step: int = 0
    mfu: float = 0.0
    peak_memory_bytes: int = 0
    data_state: dict = field(default_factory=dict)
    start_step: int = 0  # resumed from this checkpoint step (0 = fresh start)
    preempted: bool = False  # stopped on SIGTERM after saving a checkpoint (exit EXIT_PREEMPTED)
    last_checkpoint: dict | None = None
    checkpoint_stall_s: list[float] = field(default_factory=list)  # training blocked per save
    checkpoint_save_s: list[float] = field(default_factory=list)  # start of save → committed
    eval_losses: list[tuple[int, float]] = field(default_factory=list)  # (step, eval_loss) per evaluation
    extra: dict = field(default_factory=dict)  # mode-specific (parameter servers: bytes, staleness)

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")

    @property
    def tokens_per_s(self) -> float:
        # Steady state: skip the first step (shape inference, allocator warm-up) when we can.
        times = self.step_times[1:] if len(self.step_times) > 1 else self.step_times
        return self.tokens_per_step * len(times) / sum(times) if times and sum(times) > 0 else 0.0

    def summary(self) -> dict:
        return {"final_loss": self.final_loss, "steps": self.steps, "tokens_per_s": self.tokens_per_s,
                "world_size": self.world_size}


def checkpoint_dir() -> str | None:
    """``$PHALANX_CHECKPOINT_DIR``: the operator sets ``<mountPath>/<namespace>/<job>`` for a job
    with ``checkpoint.volume`` only, local mode a temporary or ``--checkpoint-dir`` directory. None:
    this run saves no checkpoints and writes no metrics.jsonl (it creates no directory at all)."""
    return os.environ.get(ENV_CHECKPOINT_DIR) or None


def checkpoint_location() -> str | None:
    """Where the built-in runtime's checkpoints go: ``$PHALANX_CHECKPOINT_URI`` (checkpoint.storage,
    object storage) if set, else :func:`checkpoint_dir`."""
    return os.environ.get(ENV_CHECKPOINT_URI) or checkpoint_dir()


class Trainer:
    """Collective: every rank builds, steps and closes together. ``stop_requested()`` says whether
    this rank got SIGTERM; the ranks agree on it at each step boundary."""

    def __init__(self, cfg: RuntimeConfig, *, stop_requested=lambda: False, progress_port: int | None = None,
                 metrics_port: int | None = None, timeline: StartupTimeline | None = None):
        self.cfg, self.spec = cfg, cfg.spec
        self.stop_requested = stop_requested
        self.timeline = timeline or StartupTimeline.for_worker()
        mark = self.timeline.mark
        self._build_process(checkpointing=checkpoint_location() is not None)
        self._build_progress(progress_port)
        mark(StartupPhase.MESH)
        self._build_model()
        mark(StartupPhase.MODEL)
        self._build_optimizer()
        mark(StartupPhase.OPTIMIZER)
        # data.prepare may tokenize a corpus for longer than the operator's hang timeout: a phase of its own
        preparing = self.spec.data.prepare is not None
        with reporting_phase(self.progress, PROGRESS_PHASE_PREPARING) if preparing else nullcontext():
            self._build_data()
        self._build_eval()
        mark(StartupPhase.DATA)
        self._build_checkpointer()
        mark(StartupPhase.CHECKPOINT)
        self._build_reporting(metrics_port)
        mark(StartupPhase.METRICS)
        self.progress.update(**{ProgressKey.STARTUP: self.timeline.seconds()})

    # ---------------------------------------------------------------- build

    def _build_process(self, *, checkpointing: bool) -> None:
        """Process group, device, layout checks (the launcher checked too; entrypoints may not),
        precision, seed, mesh (pp → dp_replicate → dp_shard → tp)."""
        tr = self.spec.training
        self.member = init_distributed()
        self.timeline.mark(StartupPhase.PROCESS_GROUP)
        self.rank, self.world = self.member.rank, self.member.world_size
        self.device = device_for_rank(self.member.local_rank)
        if self.spec.failure_policy.preflight:
            run_preflight(self.device, self.rank, self.spec.resources.gpus > 0, self.spec.failure_policy.preflight_timeout_seconds)
        errors = check_layout(self.spec, cuda_available=self.device.type == "cuda", checkpointing=checkpointing)
        if errors:
            raise SystemExit("invalid layout:\n  " + "\n  ".join(errors))
        self.precision = compute_precision(tr.precision, self.device)
        if tr.precision != self.precision and self.rank == 0:
            log.warning("training.precision bf16 needs a GPU; this CPU run computes in fp32")
        torch.manual_seed(tr.seed)
        self.parallel_dims = ParallelDims.from_spec(self.spec).build_mesh(self.device.type)

    def _build_progress(self, progress_port: int | None) -> None:
        """The progress record, served by global rank 0 from the start (preparing data and loading
        a pretrained model come before the first step)."""
        self.progress = Progress(self.spec.training.steps, self.world, self.cfg.name)
        if progress_port is None and os.environ.get(ENV_PROGRESS_PORT) and self.rank == 0:
            progress_port = int(os.environ[ENV_PROGRESS_PORT])
        self.server = ProgressServer(self.progress, progress_port) if self.rank == 0 and progress_port else None

    def _build_model(self) -> None:
        """Model parts, split and parallelised (PP → TP → AC → FSDP/DDP), and the pipeline schedule."""
        spec, pd, m = self.spec, self.parallel_dims, self.member
        ctx = ModelContext(config=self.cfg, mesh=pd, device=self.device, rank=m.rank, world_size=m.world_size,
                           local_rank=m.local_rank, seq_len=spec.data.seq_len, seed=spec.training.seed)
        self.model = build_model_parts(ctx)
        self.loss_fn = self.model.loss_fn or CountedLoss()
        self.pipeline = None
        if pd.pp_enabled:
            par = spec.parallelism
            self.pipeline = build_pipeline(self.model.parts, self.model.stage_ids, self.model.n_stages,
                                           device=self.device, group=pd.group("pp"), schedule=par.pipeline_schedule,
                                           microbatches=par.microbatches, loss_fn=self.loss_fn)
        # What the optimizer updates and clipping measures: all of it, or the LoRA adapters only.
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.autocast = autocast(self.precision, fsdp=pd.fsdp_enabled)

    def _build_optimizer(self) -> None:
        tr = self.spec.training
        self.optimizer = build_optimizer(self.params, lr=tr.lr, weight_decay=tr.weight_decay,
                                         zero=self.spec.parallelism.zero, dp_group=self.parallel_dims.group("dp"),
                                         device=self.device)
        ls = tr.lr_schedule
        self.scheduler = build_lr_scheduler(self.optimizer, total_steps=tr.steps, warmup_steps=ls.warmup_steps,
                                            decay=ls.decay, min_lr_ratio=ls.min_lr_ratio)

    def _build_data(self) -> None:
        """Data (prepared first when ``data.prepare`` asks), sharded by data-parallel rank; the
        local batch in ``accum`` microbatches (the pipeline schedule splits its own)."""
        spec, tr = self.spec, self.spec.training
        if spec.data.prepare is not None:
            self._prepare_data()
        vocab = self.model.shape.vocab_size if self.model.shape else None
        source = make_source(spec.data.source, seq_len=spec.data.seq_len, vocab_size=vocab, seed=tr.seed,
                             path=spec.data.path, dtype=spec.data.dtype)
        self.loader = DataLoader(source, global_batch=tr.global_batch_size, dp_rank=self.parallel_dims.dp_rank,
                                 dp_size=self.parallel_dims.layout.dp, seed=tr.seed)
        self.accum = 1 if self.pipeline else self.loader.local_batch // tr.micro_batch_size

    def _build_eval(self) -> None:
        """Held-out evaluation (components/evaluation.py) when ``training.eval`` is set."""
        self.evaluator = None
        self.latest_eval: dict[str, float] = {}  # the latest evaluation's, kept in every progress record
        if self.spec.training.eval is None:
            return
        vocab = self.model.shape.vocab_size if self.model.shape else 256
        self.evaluator = build_evaluator(self.spec, vocab_size=vocab, parallel_dims=self.parallel_dims,
                                         parts=self.model.parts, stage_ids=self.model.stage_ids,
                                         pipeline=self.pipeline, device=self.device, autocast=self.autocast)

    def _prepare_data(self) -> None:
        """Global rank 0 prepares ``data.path`` unless it holds this preparation already (data.path
        is storage every node reads); the others wait for it on a gloo group of its own (the
        default group's timeout is sized for training collectives, not for tokenizing a corpus)."""
        from datetime import timedelta

        from phalanx_runtime.data.prepare import ensure_prepared

        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=PREPARE_TIMEOUT_S))
        failed, error = torch.zeros(1), None
        if self.rank == 0:
            pretrained = self.spec.model.pretrained if self.spec.model else None
            tr = self.spec.training
            try:  # the eval split checked now: training.eval reads whole global batches of it
                ensure_prepared(self.spec.data, pretrained.path if pretrained else None,
                                eval_global_batch=tr.global_batch_size if tr.eval is not None else None)
            except Exception as exc:  # every rank fails, rank 0 with the cause
                failed += 1
                error = exc
        dist.all_reduce(failed, group=group)
        dist.destroy_process_group(group)
        if error is not None:
            raise error
        if failed.item():
            raise SystemExit("data.prepare failed on rank 0 (its log names the cause)")

    def _build_checkpointer(self) -> None:
        """Checkpoints (components/checkpoint.py, DCP): resume model parts, optimizer, scheduler,
        loader position and RNG from the newest committed checkpoint; LoRA adapters alone resume only
        onto the base model they were trained on."""
        self.ckpt_dir = checkpoint_dir()
        self.ckpt = None
        location = checkpoint_location()
        if location:
            pd = self.parallel_dims
            self.ckpt = Checkpointer(CheckpointConfig.from_spec(self.spec.checkpoint, location, self.ckpt_dir),
                                     parts=self.model.parts, optimizer=self.optimizer, scheduler=self.scheduler,
                                     loader=self.loader, progress=self.progress, layout=pd.describe(),
                                     dp_rank=pd.dp_rank, dp_size=pd.layout.dp, model_files=model_files_writer(self.cfg),
                                     trainable_only=adapters_only_checkpoints(self.spec.model),
                                     published=(metrics_log_path(self.ckpt_dir),) if self.ckpt_dir else ())
        self.start_step = self.ckpt.resume() if self.ckpt is not None else 0
        if self.start_step and adapters_only_checkpoints(self.spec.model):
            with self.ckpt.model_record() as recorded:
                problems = resumed_base_problems(recorded, self.spec.model.pretrained.path)
            if problems:
                raise ValueError(f"model.pretrained.path: {self.spec.model.pretrained.path} is not the base model the "
                                 f"checkpoints in {self.ckpt.store.uri} hold LoRA adapters for:\n  " + "\n  ".join(problems))

    def _build_reporting(self, metrics_port: int | None) -> None:
        """Metrics (Prometheus per pod, on local rank 0; metrics.jsonl on rank 0)."""
        spec, cfg, rank, local_rank = self.spec, self.cfg, self.rank, self.member.local_rank
        tokens_per_step = spec.training.global_batch_size * spec.data.seq_len
        peak, peak_src = device_peak_flops(self.device, self.precision)
        if metrics_port is None and os.environ.get(ENV_METRICS_PORT) and local_rank == 0:
            metrics_port = int(os.environ[ENV_METRICS_PORT])
        shape = self.model.shape
        self.metrics = MetricsLogger(flops_per_token=shape.flops_per_token(spec.data.seq_len) if shape else None,
                                     peak_flops=peak, world_size=self.world, tokens_per_step=tokens_per_step,
                                     device=self.device, prometheus_port=metrics_port if local_rank == 0 else None,
                                     labels=metric_labels(cfg.namespace, cfg.name, rank),
                                     log_path=metrics_log_path(self.ckpt_dir) if rank == 0 else None)
        if rank == 0:
            log.info("job %s: world %d layout %s model %s peak %.3g FLOP/s (%s)", cfg.name, self.world,
                     self.parallel_dims.layout.shape, shape, peak, peak_src)
        self.result = TrainResult(steps=spec.training.steps, world_size=self.world, tokens_per_step=tokens_per_step,
                                  start_step=self.start_step)

    # ---------------------------------------------------------------- steps

    def run(self) -> TrainResult:
        """Every remaining step (stopping early, with a checkpoint, when a rank got SIGTERM), then close."""
        total = self.spec.training.steps
        self.progress.update(phase="Running", step=self.start_step)
        if self.start_step == total:
            self._evaluate_resumed_at_end(total)
        for step in range(self.start_step + 1, total + 1):
            stop = self.step(step)
            if step == self.start_step + 1:
                self._started()
            if self._after_step(step, stop):
                break
        return self.close()

    def _started(self) -> None:
        """The first step is done: the start-up timeline is complete (log line and progress record)."""
        self.timeline.mark(StartupPhase.FIRST_STEP)
        self.progress.update(**{ProgressKey.STARTUP: self.timeline.seconds()})
        if self.rank == 0:
            log.info("%s", self.timeline.describe())

    def step(self, step: int) -> bool:
        """One optimizer step; True when any rank asked to stop."""
        t0 = time.perf_counter()
        inputs, labels = self.loader.next_batch()
        loss = self._forward_backward(inputs.to(self.device, non_blocking=True),
                                      labels.to(self.device, non_blocking=True))
        pp_group = self.parallel_dims.group("pp") if self.parallel_dims.pp_enabled else None
        gnorm = clip_grad_norm_(self.params, self.spec.training.grad_clip, pp_group=pp_group)
        if self.ckpt is not None:
            self.ckpt.before_update()  # an async checkpoint's staging copy is complete
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        global_loss, stop = self._reduce_loss_and_stop(loss)
        step_time = time.perf_counter() - t0
        evaluated = self._evaluate(step) if not stop else {}  # a stopping gang saves and goes
        self._record(step, global_loss, float(gnorm), step_time, evaluated)
        return stop

    def _forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
        """The local batch's loss (None on pipeline ranks without the last stage): its mean, or with
        labels that do not count, its share of the global batch's mean over the counted ones."""
        if isinstance(self.loss_fn, CountedLoss):
            microbatches = self.spec.parallelism.microbatches if self.pipeline is not None else self.accum
            self.loss_fn.begin_step(global_count=self.loader.global_count,
                                    global_labels=self.loader.global_batch * labels.shape[1],
                                    dp=self.parallel_dims.layout.dp, microbatches=microbatches)
        if self.pipeline is not None:
            with self.autocast:
                return self.pipeline.step(inputs, labels)
        accum, parts = self.accum, self.model.parts
        loss = torch.zeros((), device=self.device)
        for i, (x, y) in enumerate(zip(inputs.chunk(accum), labels.chunk(accum), strict=True)):
            with grad_sync(parts, enabled=i == accum - 1), self.autocast:
                mb_loss = self.loss_fn(parts[0](x), y) / accum
            mb_loss.backward()
            loss += mb_loss.detach()
        return loss

    def _reduce_loss_and_stop(self, loss: torch.Tensor | None) -> tuple[float, bool]:
        """Global mean loss: last-stage ranks hold their dp shard's loss (tp ranks repeat it). The
        second element counts ranks that got SIGTERM, so every rank stops at the same step."""
        device = self.device
        is_last_stage = self.pipeline is None or self.pipeline.has_last
        lsum = loss.detach().float() if (is_last_stage and loss is not None) else torch.zeros((), device=device)
        lsum = torch.cat([lsum.reshape(1).to(device), torch.full((1,), float(self.stop_requested()), device=device)])
        dist.all_reduce(lsum, op=dist.ReduceOp.SUM)
        layout = self.parallel_dims.layout
        return float(lsum[0]) / (layout.dp * layout.tp), float(lsum[1]) > 0

    def _evaluate(self, step: int) -> dict[str, float]:
        """The eval metrics when an evaluation is due after ``step`` (it runs here), else {}."""
        ev = self.evaluator
        if ev is None or not ev.due(step, self.spec.training.steps):
            return {}
        t0 = time.perf_counter()
        loss = ev.evaluate()
        self.result.eval_losses.append((step, loss))
        evaluated = eval_metrics(loss)
        # A non-finite value is no reported metric: the record drops the eval metrics until the next.
        self.latest_eval = {k: v for k, v in evaluated.items() if math.isfinite(v)}
        if self.rank == 0:
            log.info("step %d eval_loss %.5f perplexity %.4g (%d batches, %.3fs)", step, loss,
                     evaluated[PERPLEXITY], ev.batches, time.perf_counter() - t0)
        return evaluated

    def _evaluate_resumed_at_end(self, step: int) -> None:
        """A run resumed at its last step has no step left to evaluate after, and the checkpoint
        holds no eval metrics (a stop at the last step saves without evaluating): the final
        evaluation runs here once, for the final record."""
        if self._evaluate(step):
            self.progress.update(metrics=dict(self.latest_eval))

    def _record(self, step: int, loss: float, gnorm: float, step_time: float, evaluated: dict[str, float]) -> None:
        m = self.metrics.record(step=step, loss=loss, grad_norm=gnorm, lr=self.scheduler.get_last_lr()[0],
                                step_time=step_time, evaluated=evaluated)
        r = self.result
        r.losses.append(loss)
        r.grad_norms.append(gnorm)
        r.step_times.append(step_time)
        r.mfu, r.peak_memory_bytes = m.mfu, m.peak_memory_bytes
        # the same record as any script's: its learning rate, gradient norm and latest eval metrics are
        # reported metrics
        self.progress.update(step=step, loss=loss, tokensPerSecond=m.tokens_per_s, mfu=m.mfu,
                             stepTimeSeconds=step_time,
                             metrics={"learning_rate": m.lr, "grad_norm": m.grad_norm, **self.latest_eval})
        total = self.spec.training.steps
        if self.rank == 0 and (step % self.spec.training.log_every == 0 or step == total):
            log.info("step %d/%d loss %.5f gnorm %.4f lr %.3g %.3fs %.0f tok/s mfu %.2f%% mem %.0fMiB",
                     step, total, loss, m.grad_norm, m.lr, step_time, m.tokens_per_s, 100 * m.mfu,
                     m.peak_memory_bytes / 2**20)

    def _after_step(self, step: int, stop: bool) -> bool:
        """Checkpoint when due; on a stop, save synchronously and end the loop (True)."""
        ckpt = self.ckpt
        if ckpt is None:
            self.result.preempted = stop
            return stop
        ckpt.poll()
        if stop:
            if self.rank == 0:
                log.warning("SIGTERM: saving a checkpoint at step %d and exiting %d", step, EXIT_PREEMPTED)
            ckpt.save(step, force_sync=True)
            self.result.preempted = True
            return True
        total = self.spec.training.steps
        if ckpt.should_save(step, total):
            ckpt.save(step, force_sync=step == total)
        return False

    # ---------------------------------------------------------------- close

    def close(self) -> TrainResult:
        """Finish checkpoint work, report the final phase, tear the process group down (if ours)."""
        r, ckpt = self.result, self.ckpt
        if ckpt is not None:
            ckpt.close()
            exporting = not r.preempted and (self.spec.checkpoint.export_consolidated
                                             or self.spec.checkpoint.export_hugging_face)
            # after the last step: an export of a large model can outlast the operator's hang timeout
            with reporting_phase(self.progress, PROGRESS_PHASE_EXPORTING) if exporting else nullcontext():
                if self.spec.checkpoint.export_consolidated and not r.preempted:
                    ckpt.export_consolidated()
                if self.spec.checkpoint.export_hugging_face and not r.preempted:
                    export_in_job(ckpt)
            if os.environ.get(ENV_DEBUG_FULL_STATE):
                ckpt.dump_full_state(os.environ[ENV_DEBUG_FULL_STATE])
            r.last_checkpoint = ckpt.last
            r.checkpoint_stall_s, r.checkpoint_save_s = ckpt.stall_seconds, ckpt.save_seconds
        r.data_state = self.loader.state_dict()
        self.progress.update(phase="Preempted" if r.preempted else "Succeeded")
        if self.rank == 0:
            write_final(self.progress, os.environ.get(ENV_TERMINATION_LOG, DEFAULT_TERMINATION_LOG))
        if self.server is not None:
            self.server.close()
        if self.member.created:
            dist.barrier()
            dist.destroy_process_group()
        return r
