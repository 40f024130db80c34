"""Our own mutation check: break the production code one named way at a time, in a
scratch copy of the checkout, and run the tests that claim to catch that break.

Run before a change to the controller, probes, sets, forks, selection, compare,
reproduce or the per-generation table and its exports lands (docs/architecture.md)::

    .venv/bin/python -m tests.mutations            # every mutation below
    .venv/bin/python -m tests.mutations NAME ...   # only these
    .venv/bin/python -m tests.mutations --list
    python3 tests/mutations.py                     # the same, in the checkout's .venv

Run by a Python without the tests' dependencies (pytest, pygit2), it runs itself again
under the checkout's ``.venv/bin/python`` (made by the README's test command), or says
how to make one.

Each mutation names a file, an exact text that occurs once in it, the text that
replaces it, and the tests that must fail when it does. The checkout is copied to a
temporary folder (its .git, virtualenv and caches left out); each mutation is applied
there, its tests run (``python -m pytest``, the copy first on ``PYTHONPATH``, so the
tests' own ``ouro`` processes run the mutated code too), and the file restored. The
claimed tests run unmutated first (a test that fails anyway catches nothing); a
mutation is caught when every test it claims fails. Exit 0 when every mutation is
caught, 1 when one survived (or a claimed test fails unmutated),
2 on a bad list or argument. The sandbox's isolation (reconciler/kernel/sandbox) is
never mutated: a mutation under it is refused.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
_AGAIN = "OURO_MUTATIONS_IN_VENV"  # set when it ran itself again: never a second time
NEVER_MUTATED = "reconciler/kernel/sandbox/"  # the isolation itself
_LEFT_OUT = (".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__",
             "*.egg-info", ".hypothesis")
_TIMEOUT = 300.0  # seconds for one mutation's tests


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the checkout
    old: str  # occurs exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest node ids that must fail
    why: str  # the bug it stands for


_CONTROLLER = "reconciler/engine/controller/"
_TRANSITIONS = "tests/controller/test_transitions.py::"
_SELECTION = "reconciler/plan/selection/"
_DECIDE = "tests/selection/test_decide.py::"
_CHECK_RECORDS = "tests/selection/test_check_records.py::"
_STATISTICS = "reconciler/report/statistics.py"
_STATS_TEST = "tests/compare/test_statistics.py::"
_REPRODUCE = "reconciler/engine/reproduce/"
_COMPARE_TEST = "tests/reproduce/test_compare.py::"
_DESCENT = "tests/history/test_descent.py::"
_ONE_TABLE = "tests/export_mlflow/test_one_table.py::"
_SHOWN = "tests/selection/test_shown.py::"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "controller-error-every-pass", _CONTROLLER + "loop.py",
        '        if not same:\n            self.notifier.send("controller-error"',
        '        if True:\n            self.notifier.send("controller-error"',
        (_TRANSITIONS + "test_a_controller_error_is_notified_once_while_it_lasts",
         "tests/controller/test_settings.py::"
         "test_an_unreachable_repository_is_a_controller_error_said_once"),
        "a controller error notified at every failed pass, not once"),
    Mutation(
        "target-reached-twice", _CONTROLLER + "loop.py",
        '            self.notifier.send(\n                "target-reached" if goal',
        '            for _twice in range(2 if goal else 1):\n                self.notifier.send(\n'
        '                "target-reached" if goal',
        (_TRANSITIONS + "test_a_lineages_course_is_notified_once_per_transition",
         "tests/controller/test_notify_lineages.py::"
         "test_a_death_streak_and_a_target_reached_are_notified_once_each"),
        "target-reached sent twice"),
    Mutation(
        "budget-block-forgotten", _CONTROLLER + "loop.py",
        "            blocked = budget.message()\n", "            pass\n",
        (_TRANSITIONS + "test_the_budget_stays_blocked_through_passes_that_start_nothing",),
        "a pass that starts nothing clears the day's budget block (status says unblocked)"),
    Mutation(
        "controller-epoch-targets-stale", _CONTROLLER + "loop.py",
        "            self.passes.forget()  # a kept member's target moved",
        "            pass  # a kept member's target moved",
        ("tests/controller/test_selection.py::"
         "test_the_controller_runs_every_epoch_of_a_selected_set",),
        "the controller's next epoch leaves its kept members at the old epoch's target"),
    Mutation(
        "death-streak-every-death", _CONTROLLER + "loop.py",
        "            if streak == self.settings.death_streak:",
        "            if streak >= self.settings.death_streak:",
        (_TRANSITIONS + "test_a_lineages_course_is_notified_once_per_transition",),
        "a death streak notified again at each death past the threshold"),
    Mutation(
        "refused-every-pass", _CONTROLLER + "loop.py",
        '                was is None or was.status != "True" or was.reason != now.reason):',
        "                True):",
        (_TRANSITIONS + "test_a_refusal_is_notified_when_it_starts_or_changes",),
        "a refusal notified at every pass it lasts"),
    Mutation(
        "done-by-spec-unsaid", _CONTROLLER + "loop.py",
        "        for name, stop in newly_done(ready, self.passes.done_by_spec):",
        "        for name, stop in []:",
        ("tests/controller/test_notify_lineages.py::"
         "test_a_lineage_done_because_its_spec_changed_is_notified",),
        "a lineage done because its spec changed is not notified (no engine event says it)"),
    Mutation(
        "done-by-spec-said-again", _CONTROLLER + "loop.py",
        'was.status != "True" or was.reason != "done")]', "True)]",
        (_TRANSITIONS + "test_a_lineage_done_because_its_spec_changed_is_said_once",),
        "a lineage done by its spec said again at every pass"),
    Mutation(
        "reason-moves-the-time", _CONTROLLER + "conditions.py",
        "old.last_transition if old is not None and old.status == status else at",
        "old.last_transition if old is not None and old.status == status "
        "and old.reason == reason else at",
        (_TRANSITIONS + "test_a_transition_time_moves_only_with_the_status_row_by_row",
         "tests/controller/test_conditions.py::"
         "test_a_transition_time_changes_only_with_the_status"),
        "a condition's time reset when only its reason changes"),
    Mutation(
        "webhook-delivered-inline", _CONTROLLER + "notify.py",
        '        for inbox in self._queues:\n            inbox.put(item)',
        '        for name, deliver in self._channels:\n'
        '            try:\n'
        '                for attempt in Retrying(stop=stop_after_attempt(self.settings.attempts),'
        '\n                        wait=wait_exponential(multiplier=0.5, '
        'max=self.settings.wait_max)):\n'
        '                    with attempt:\n'
        '                        deliver(json.dumps(item, sort_keys=True, default=str).encode())\n'
        '            except Exception:\n'
        '                pass',
        ("tests/controller/test_notify.py::"
         "test_a_dead_webhook_never_slows_generations[answers-500]",),
        "a notification delivered, with its retries, on the reconcile path"),
    Mutation(
        "until-at-least-strict", "reconciler/plan/probes.py",
        "value >= condition.at_least", "value > condition.at_least",
        ("tests/probes/test_until.py::test_each_until_kind_stops_and_a_failure_never_does",),
        "`at_least` met only above the value"),
    Mutation(
        "backfill-record-wrong-metrics", "reconciler/engine/probes/measure.py",
        '"metrics": run.metrics,',
        '"metrics": run.metrics and {**run.metrics, "ok": False},',
        ("tests/probes/test_backfill.py::"
         "test_a_backfill_killed_midway_resumes_with_only_what_is_missing",),
        "a record that is not the measurement"),
    Mutation(
        "backfill-measures-again", "reconciler/engine/probes/measure.py",
        "if number not in covered.get(probe.digest, frozenset())]", "]",
        ("tests/probes/test_backfill.py::test_every_generation_is_measured_once_and_recorded",
         "tests/probes/test_backfill.py::"
         "test_a_backfill_killed_midway_resumes_with_only_what_is_missing"),
        "a resumed back-fill measures what was measured already"),
    Mutation(
        "set-orphans-forgotten", "reconciler/engine/sets.py",
        "    return find_orphans(names, known, existing)", "    return []",
        ("tests/sets/test_plan_sets.py::"
         "test_raising_creates_and_lowering_orphans_without_deleting",
         "tests/sets/test_seeing_sets.py::"
         "test_status_groups_a_set_by_cell_and_marks_orphans_as_plan_does"),
        "the members a lowered set no longer names are not shown as its orphans"),
    Mutation(
        "fork-refusal-dropped", "reconciler/plan/planner.py",
        "        found.append(Refusal(*forked))", "        pass",
        ("tests/forks/test_fork_rules.py::"
         "test_a_fork_that_cannot_start_is_refused_by_the_plan_after_the_kernels_reasons",),
        "a fork whose parent has no such generation planned as a birth"),
    Mutation(
        "fork-birth-cut-off-bricks", "reconciler/state/observe.py",
        "    if birth_cut_off(paths):\n        return unborn(paths)",
        "    if False:\n        return unborn(paths)",
        ("tests/forks/test_fork_lineages.py::"
         "test_a_birth_cut_off_midway_is_made_again_and_leftovers_without_its_marker_are_kept",),
        "a fork's birth killed midway leaves places the next apply refuses (a bricked fork)"),
    Mutation(
        "fork-birth-leftovers-kept", "reconciler/engine/forks.py",
        "        _remove(list(places), places)\n        marker.unlink()",
        "        marker.unlink()",
        ("tests/forks/test_fork_lineages.py::"
         "test_a_birth_cut_off_midway_is_made_again_and_leftovers_without_its_marker_are_kept",),
        "a birth made again over a cut-off one's leftovers"),
    Mutation(
        "restore-any-older-body", "reconciler/kernel/transaction/publish.py",
        "        if body is not None and body != current:", "        if body is not None:",
        ("tests/verify/test_restore_agreement.py::"
         "test_the_kernel_restores_by_the_documented_rule_and_the_audit_finds_it_so",),
        "a death restores an older body equal to the one it extends (the kernel and the "
        "audit share the rule)"),
    Mutation(
        "apply-report-last-epoch-only", "reconciler/engine/session.py",
        "        return replace(later, lineages=[*earlier.values(), *joined],",
        "        return later\n"
        "        return replace(later, lineages=[*earlier.values(), *joined],",
        ("tests/selection/test_population.py::test_eight_replicas_three_epochs_keep_four",),
        "apply's report of a selected set only its last epoch's"),
    Mutation(
        "viewer-born-members-not-expanded", "reconciler/viewer/server.py",
        "    loaded = expand(load_specs(specs, state_dir=state_dir), state_dir_or_none(state_dir))",
        "    loaded = load_specs(specs, state_dir=state_dir)",
        ("tests/viewer/test_browser_selection.py::"
         "test_a_selected_sets_page_shows_its_epochs_fitness_and_family",),
        "the viewer reads a selected set without its decisions: the born members are not its"),
    Mutation(
        "viewer-tree-flat", "reconciler/viewer/epochs.py",
        "                nodes[parent].children.append(nodes[name])\n"
        "                placed.add(name)",
        "                pass",
        ("tests/viewer/test_browser_selection.py::"
         "test_a_selected_sets_page_shows_its_epochs_fitness_and_family",),
        "the family tree drawn without its born members under their parents"),
    # selection (reconciler/plan/selection, engine/selection_records)
    Mutation(
        "truncation-keeps-one-less", _SELECTION + "truncation.py",
        "ranked[:min(rule.keep or len(ranked), len(ranked), size)]",
        "ranked[:min(rule.keep or len(ranked), len(ranked), size) - 1]",
        (_DECIDE + "test_truncation_keeps_the_top_k_ties_broken_by_name",),
        "truncation keeps keep - 1 members"),
    Mutation(
        "lowest-ignored", _SELECTION + "decision.py",
        "    sign = 1.0 if rule.lowest else -1.0", "    sign = -1.0",
        (_DECIDE + "test_lowest_turns_the_ranking_round",),
        "`lowest: true` still ranks the highest first"),
    Mutation(
        "ties-not-broken-by-name", _SELECTION + "decision.py",
        "        return sign * value, one.name", '        return sign * value, ""',
        (_DECIDE + "test_truncation_keeps_the_top_k_ties_broken_by_name",),
        "equal values ranked in the order the table lists them, not by name"),
    Mutation(
        "selection-seed-ignored", _SELECTION + "decision.py",
        "np.random.default_rng([seed, epoch])", "np.random.default_rng([0, epoch])",
        (_DECIDE + "test_tournament_is_the_same_for_a_seed_and_another_for_another_seed",),
        "a tournament draws the same whatever the spec's seed"),
    Mutation(
        "verify-selection-seed-unchecked", "reconciler/engine/selection_records.py",
        '_RULE = ("method", "by", "lowest", "seed")', '_RULE = ("method", "by", "lowest")',
        (_CHECK_RECORDS + "test_an_edited_value_or_seed_is_named",),
        "verify accepts a decision recorded under another seed than the spec's"),
    Mutation(
        "verify-selection-probe-records-unchecked", "reconciler/engine/selection_records.py",
        '        if now != item.get("probe_records"):', "        if False:",
        (_CHECK_RECORDS + "test_a_probe_record_changed_or_removed_after_the_decision_is_named",),
        "verify does not compare the probe records with the digests the decision recorded"),
    # compare (reconciler/report/statistics.py)
    Mutation(
        "survivor-rule-off-by-one", _STATISTICS,
        "    if member.last >= generation:\n        value",
        "    if member.last > generation:\n        value",
        (_STATS_TEST + "test_the_survivor_rule",),
        "a member whose history ends at G is not read at G"),
    Mutation(
        "mann-whitney-one-sided", _STATISTICS,
        'alternative="two-sided"', 'alternative="less"',
        (_STATS_TEST + "test_groups_and_pair_by_hand",),
        "the p-value of a one-sided test printed as the two-sided one"),
    Mutation(
        "ci-confidence-ignored", _STATISTICS,
        "confidence_level=confidence,", "confidence_level=0.9,",
        (_STATS_TEST + "test_the_interval_has_the_confidence_asked",),
        "a 90% interval printed as the 95% one"),
    Mutation(
        "carry-last-reads-the-first", _STATISTICS,
        "    at = max(earlier)", "    at = min(earlier)",
        (_STATS_TEST + "test_the_survivor_rule",),
        "--carry-last reads a stopped member's first measured generation, not its last"),
    # reproduce (reconciler/engine/reproduce, engine/recorded.py)
    Mutation(
        "reproduce-verdict-ignores-divergence", "reconciler/engine/reproduce/run.py",
        '"diverged" if divergence is not None else "reproduced"', '"reproduced"',
        ("tests/reproduce/test_reproduce.py::"
         "test_an_organism_that_writes_the_time_diverges_at_its_first_life",),
        "a reproduction that diverged said reproduced"),
    Mutation(
        "reproduce-outcome-not-compared", _REPRODUCE + "compare.py",
        '    if was != now:\n        what.append("outcome")',
        '    if False:\n        what.append("outcome")',
        (_COMPARE_TEST + "test_what_differs[outcome]",),
        "another outcome (a death where the record changed) is not a divergence"),
    Mutation(
        "reproduce-mode-not-compared", _REPRODUCE + "compare.py",
        "        elif was[0] != now[0]:", "        elif False:",
        (_COMPARE_TEST + "test_a_mode_alone_is_a_difference",),
        "a path whose mode alone differs is not a divergence"),
    Mutation(
        "clock-puts-back-any-stamp", _REPRODUCE + "compare.py",
        '            if (self.reproduced.get(number) == match.group("at")\n'
        "                    and number in self.recorded):",
        "            if number in self.recorded:",
        (_COMPARE_TEST + "test_only_the_kernels_stamps_are_put_back",),
        "a heading stamp the organism wrote is masked as if the kernel had"),
    Mutation(
        "recorded-replies-from-the-fork-point", "reconciler/engine/recorded.py",
        "spec.fork.generation + 1 if spec.fork is not None else 1",
        "spec.fork.generation if spec.fork is not None else 1",
        ("tests/reproduce/test_recorded.py::"
         "test_a_fork_is_answered_from_after_its_fork_point_and_reproduces",),
        "a recorded fork replayed from the reply its parent's fork point already used"),
    # the per-generation table and its exports (reconciler/state/table.py, report/table.py)
    Mutation(
        "row-0-dropped", "reconciler/state/seed_row.py",
        "    return summary.rows if seed is None else (seed, *summary.rows)",
        "    return summary.rows",
        (_DESCENT + "test_the_absolute_generation_counts_from_the_root_ancestors_seed",
         _ONE_TABLE + "test_csv_jsonl_and_json_are_the_hand_written_table"),
        "the table without row 0 (the seed)"),
    Mutation(
        "absolute-generation-off-by-one", "reconciler/state/table.py",
        "else self.seed_generation + generation", "else self.seed_generation + generation + 1",
        (_DESCENT + "test_the_absolute_generation_counts_from_the_root_ancestors_seed",),
        "a fork's absolute generation counted one too far"),
    Mutation(
        "csv-cells-one-column-off", "reconciler/report/table.py",
        "        writer.writerow([csv_cell(row.value(column)) for column in columns])",
        "        writer.writerow([csv_cell(row.value(column)) for column in columns[1:]]"
        ' + [""])',
        (_ONE_TABLE + "test_csv_jsonl_and_json_are_the_hand_written_table",),
        "CSV cells shifted one column from their header"),
    Mutation(
        "probe-failures-not-joined", "reconciler/state/table.py",
        "                          failures.get(facts.generation, {}))",
        "                          {})",
        (_ONE_TABLE + "test_csv_jsonl_and_json_are_the_hand_written_table",),
        "a probe's failure reason left out of its generation's row"),
    Mutation(
        "mlflow-seed-a-step", "reconciler/engine/mlflow_export.py",
        "        if row.facts.status == SEED_OUTCOME:\n            continue",
        "        if False:\n            continue",
        (_ONE_TABLE + "test_mlflow_holds_the_hand_written_table[folder]",),
        "row 0 (the seed, no life) logged to MLflow as step 0"),
    Mutation(
        "epoch-counts-from-generation-0", "reconciler/spec/sets.py",
        "max(0, generation - 1) // self.selection.every",
        "generation // self.selection.every",
        (_SHOWN + "test_export_has_the_epoch_each_generation_ran_in",),
        "a selected set's last generation of an epoch counted in the next epoch"),
    Mutation(
        "not-selected-planned-in-sync", "reconciler/plan/planner.py",
        "    return found if isinstance(found, spec_sets.NotSelected) else None",
        "    return None",
        (_SHOWN + "test_plan_and_log_show_the_stopped_members",),
        "a member a selection stopped planned as an ordinary lineage in sync"),
    Mutation(
        "epoch-fitness-best-is-first", "reconciler/report/epoch_fitness.py",
        "    pick = min if lowest else max", "    pick = max if lowest else min",
        (_SHOWN + "test_status_shows_not_selected_and_the_epochs",),
        "status's best of an epoch the worst one"),
    Mutation(
        "epoch-ci-of-another-epoch", "reconciler/report/epoch_fitness.py",
        "        group = groups.get(_group(epoch))",
        "        group = groups.get(_group(max(values)))",
        (_SHOWN + "test_status_shows_not_selected_and_the_epochs",),
        "every epoch's n, mean and CI read from the last epoch's group"),
    Mutation(
        "epoch-ci-depends-on-order", "reconciler/report/epoch_fitness.py",
        "for name, value in sorted(found.items())]", "for name, value in found.items()]",
        ("tests/selection/test_epoch_fitness.py::"
         "test_the_same_values_in_another_order_give_the_same_interval",),
        "an epoch's CI resampled in the order a table happened to read its members"),
    Mutation(
        "forked-broker-loads-ca-again", "reconciler/kernel/broker/forkserver.py",
        "    context = providers.tls_context()  # the CA", "    context = False  # the CA",
        ("tests/kernel_broker/test_fork_server.py::"
         "test_a_forked_broker_verifies_tls_with_the_context_the_server_made_once",),
        "the fork server forks without the TLS context: every broker loads the CA bundle"),
    Mutation(
        "provider-ignores-shared-tls", "reconciler/kernel/broker/providers.py",
        "retries=0,\n                                                                 "
        "verify=tls_context()))",
        "retries=0))",
        ("tests/kernel_broker/test_fork_server.py::"
         "test_a_forked_broker_verifies_tls_with_the_context_the_server_made_once",),
        "an HTTP provider makes its own TLS context (the CA bundle loaded per broker)"),
    # issue 37, the last pass: what a generation and an apply no longer pay for
    Mutation(
        "fork-server-not-warmed", "reconciler/kernel/broker/door.py",
        "            forker.start(PACKAGE_ROOT, dict(_ENVIRONMENT), "
        "no_bytecode=sys.dont_write_bytecode)",
        "            pass",
        ("tests/kernel_broker/test_fork_server.py::"
         "test_a_warmed_server_is_started_once_and_forks_the_first_broker",),
        "door.warm starts no server: the first generation waits for its start-up"),
    Mutation(
        "broker-preloads-no-transport", "reconciler/kernel/broker/forkserver.py",
        "    httpx.HTTPTransport(verify=context).close()", "    del context",
        ("tests/kernel_broker/test_fork_server.py::"
         "test_a_broker_imports_nothing_the_server_did_not",),
        "every HTTP broker imports httpcore and h11 again"),
    Mutation(
        "broker-reads-byte-by-byte", "reconciler/kernel/broker/process.py",
        "chunk = os.read(fd, 1 << 16)", "chunk = os.read(fd, 1)",
        ("tests/kernel_broker/test_requests.py::"
         "test_a_configuration_with_more_after_its_line_is_refused",),
        "a broker reads its configuration a byte at a time (and ignores what follows it)"),
    Mutation(
        "audit-batch-per-lineage", "reconciler/engine/audits.py",
        "    return waiting >= max(1, min(unaudited, -(-expected // BATCH_SHARE)))",
        "    return waiting >= 1",
        ("tests/verify/test_batches.py::"
         "test_a_fleet_ending_one_by_one_makes_four_batches_not_one_per_lineage",),
        "each lineage that ends is a batch of its own: a child's start each"),
    Mutation(
        "host-versions-read-per-call", "reconciler/engine/kernel_store_writer.py",
        "        if not _versions:", "        if True:",
        ("tests/kernels/test_host_versions.py::"
         "test_the_versions_are_read_once_on_their_own_thread_and_shared",),
        "emacs --version run by every lineage that asks"),
    Mutation(
        "offline-check-imports-httpx", "reconciler/engine/provider_check.py",
        "    if model.provider in registry.OFFLINE_PROVIDERS:  # (nor httpx's import, ~50 ms)",
        "    import httpx  # noqa: F401\n"
        "    if model.provider in registry.OFFLINE_PROVIDERS:  # (nor httpx's import, ~50 ms)",
        ("tests/provider_check/test_provider_check.py::"
         "test_an_offline_provider_costs_no_http_client",),
        "an offline lineage's provider check imports httpx"),
    Mutation(
        "audit-child-imports-the-models", "reconciler/state/probes.py",
        "from reconciler.spec.probe_digest import digest_of",
        "from reconciler.spec.probes import digest_of",
        ("tests/verify/test_child.py::test_the_child_audits_without_the_spec_models",),
        "the audit's child imports the spec's pydantic models"),
    Mutation(
        "audit-child-tears-down", "reconciler/state/audit_child.py",
        "    os._exit(status)", "    sys.exit(status)",
        ("tests/verify/test_child.py::test_the_child_audits_without_the_spec_models",),
        "the audit's child tears its interpreter down before the supervisor hears it exit"),
)


class ListError(Exception):
    """The list of mutations is not well formed (the message says which and why)."""


def check(mutation: Mutation, root: Path = ROOT) -> None:
    """Raise ``ListError`` unless ``mutation`` applies to ``root`` once and stays Python."""
    if mutation.path.startswith(NEVER_MUTATED) or ".." in Path(mutation.path).parts:
        raise ListError(f"{mutation.name}: {mutation.path} is the sandbox's isolation (or "
                        "outside the checkout): never mutated")
    path = root / mutation.path
    if not path.is_file():
        raise ListError(f"{mutation.name}: no file {mutation.path}")
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise ListError(f"{mutation.name}: its old text occurs {count} times in "
                        f"{mutation.path} (it must occur once)")
    if mutation.old == mutation.new or not mutation.tests:
        raise ListError(f"{mutation.name}: it changes nothing or claims no test")
    try:
        ast.parse(text.replace(mutation.old, mutation.new))
    except SyntaxError as error:
        raise ListError(f"{mutation.name}: the mutated {mutation.path} is no Python "
                        f"({error.msg}, line {error.lineno})") from error
    for test in mutation.tests:
        if not (root / test.split("::")[0]).is_file():
            raise ListError(f"{mutation.name}: no test file for {test}")


def _scratch(into: Path) -> Path:
    copy = into / "checkout"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*_LEFT_OUT), symlinks=True)
    return copy


@dataclass(frozen=True)
class Ran:
    code: int  # pytest's exit status; -1: timed out
    seconds: float
    tail: str  # pytest's last line
    failed: tuple[str, ...]  # the node ids that failed or errored


def _commit() -> str:
    """The checkout's commit: the scratch copy has no .git, so the tests' own ``ouro``
    processes are told the instrument commit by its override."""
    import pygit2

    return str(pygit2.Repository(str(ROOT)).head.target)


def _pytest(copy: Path, tests: Sequence[str]) -> Ran:
    env = {"OURO_INSTRUMENT_COMMIT": _commit(), **os.environ, "PYTHONPATH": str(copy),
           "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p",
                               "no:cacheprovider", *tests], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return Ran(-1, time.monotonic() - started, "timed out", ())
    lines = done.stdout.strip().splitlines()
    failed = tuple(line.split()[1] for line in lines
                   if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1)
    return Ran(done.returncode, time.monotonic() - started, (lines or [""])[-1], failed)


def missed(mutation: Mutation, ran: Ran) -> list[str]:
    """The claimed tests that did not fail (a parametrized test fails if one case does;
    a run that timed out or could not collect counts as failing every test)."""
    if ran.code in (-1, 2, 3):  # timed out, interrupted by an error, internal error
        return []
    return [test for test in mutation.tests
            if not any(node == test or node.startswith(test + "[") for node in ran.failed)]


def run(chosen: Sequence[Mutation], *, baseline: bool = True) -> int:
    """Apply each mutation in a scratch copy and run its tests; the exit code."""
    with tempfile.TemporaryDirectory(prefix="ouro-mutations-") as tmp:
        copy = _scratch(Path(tmp))
        if baseline:
            tests = list(dict.fromkeys(t for m in chosen for t in m.tests))
            ran = _pytest(copy, tests)
            print(f"unmutated: {len(tests)} tests, exit {ran.code} in {ran.seconds:.0f}s "
                  f"({ran.tail})", flush=True)
            if ran.code != 0:
                print("a claimed test fails unmutated: nothing can be said of the mutations")
                return 1
        survived: list[str] = []
        for mutation in chosen:
            path = copy / mutation.path
            original = path.read_text()
            path.write_text(original.replace(mutation.old, mutation.new))
            try:
                ran = _pytest(copy, mutation.tests)
            finally:
                path.write_text(original)
            # every claimed test must fail (exit 5, no test collected, or 4, a usage
            # error, says nothing of the mutation)
            passed = missed(mutation, ran) if ran.code not in (0, 4, 5) else list(
                mutation.tests)
            if passed:
                survived.append(mutation.name)
            print(f"{'SURVIVED' if passed else 'caught  '} {mutation.name} ({mutation.why}): "
                  f"exit {ran.code} in {ran.seconds:.0f}s ({ran.tail})"
                  + (f"\n    not failed: {', '.join(passed)}" if passed else ""), flush=True)
    print(f"{len(chosen) - len(survived)} of {len(chosen)} mutations caught"
          + (f"; survived: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip running the claimed tests unmutated first")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    unknown = [name for name in args.names if name not in by_name]
    if unknown:
        print(f"no mutation named {', '.join(unknown)} (known: {', '.join(by_name)})",
              file=sys.stderr)
        return 2
    chosen = [by_name[name] for name in args.names] or list(MUTATIONS)
    try:
        for mutation in chosen:
            check(mutation)
    except ListError as error:
        print(f"tests.mutations: {error}", file=sys.stderr)
        return 2
    if args.list:
        for mutation in chosen:
            print(f"{mutation.name}: {mutation.path}: {mutation.why}\n    "
                  + "\n    ".join(mutation.tests))
        return 0
    if not all(importlib.util.find_spec(name) for name in ("pytest", "pygit2")):
        if _VENV_PYTHON.is_file() and not os.environ.get(_AGAIN):
            os.execve(_VENV_PYTHON, [str(_VENV_PYTHON), str(Path(__file__).resolve()),
                                     *(sys.argv[1:] if argv is None else argv)],
                      {**os.environ, _AGAIN: "1"})
        print(f"tests.mutations: {sys.executable} has no pytest or pygit2, and "
              f"{_VENV_PYTHON} {'has none either' if _VENV_PYTHON.is_file() else 'is missing'}"
              ": make the checkout's virtualenv with the README's test command, then run "
              "this again", file=sys.stderr)
        return 2
    return run(chosen, baseline=not args.no_baseline)


if __name__ == "__main__":
    sys.exit(main())
