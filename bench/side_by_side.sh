#!/usr/bin/env bash
# Side by side, one run: N generations by the original instrument's kernel (github:scottviteri/
# ouroboros; its own tests' fake systemd, the Debian emacs fix) vs one whole `ouro apply` of N
# generations (echo provider: no model call; import, plan, kernel store, audit included), same
# machine, ROUNDS rounds alternating. At equal CPU: the fake systemd enforces no quota, so the
# ouro lineage gets a whole core too (cpu: 600s over the default wall of 600s; CPU=120s is the
# default ceilings' 20 %). Prints each round's s/gen and the ratio of the medians.
#   OURO_PEER=/path/to/clone [N=20] [ROUNDS=3] [OURO=ouro] bash bench/side_by_side.sh
set -u
N=${N:-20}; ROUNDS=${ROUNDS:-3}
# not under /tmp: ouro refuses lineage storage on the host Python's path
W=${W:-$(mktemp -d -p "${SIDE_BY_SIDE_DIR:-/var/tmp}")}; mkdir -p $W/bin
cp -r "${OURO_PEER:?set OURO_PEER to a clone of the original instrument}" $W/peer
# Debian: /usr/bin/emacs -> /etc/alternatives/emacs; bind it read-only in the original's sandbox
grep -q etc/alternatives $W/peer/kernel.sh || sed -i 's#--ro-bind /usr /usr#--ro-bind /usr /usr --ro-bind /etc/alternatives /etc/alternatives#' $W/peer/kernel.sh
python3 - $W/peer/test_kernel.py $W/bin <<'PY'
import re, sys, pathlib
src = pathlib.Path(sys.argv[1]).read_text()
for name in ("systemd-run", "systemctl"):
    m = re.search(r'self\.write_executable\(\s*"%s",\s*"""(.*?)""",' % name, src, re.S)
    p = pathlib.Path(sys.argv[2]) / name; p.write_text(m.group(1)); p.chmod(0o755)
PY
export KERNEL_TEST_SERVICE_STATUS=$W/bin/status KERNEL_TEST_SCOPE_ARGS=$W/bin/scope
OURO=${OURO:-ouro}
# byte code as an installed ouro has it (pip compiles a wheel's; a checkout's is written on
# first use, unless PYTHONDONTWRITEBYTECODE is set, as on some CI images: then every apply
# would compile its modules again)
PY=$(head -1 "$(command -v "$OURO")" | sed 's/^#!//')
case $PY in */python*) "$PY" -m compileall -q "${PROJECT:-.}/reconciler" >/dev/null ;; esac
export OURO_INSTRUMENT_COMMIT=$(git -C "${PROJECT:-.}" rev-parse HEAD)
export OURO_STATE_DIR=${OURO_STATE_DIR:-$W/state}
per_gen() { echo "($2-$1)/$N" | bc -l | cut -c1-5; }
for r in $(seq $ROUNDS); do
  L=$W/orig$r
  ( export PATH=$W/bin:$PATH LINEAGE=$L OUROBOROS_INSTRUMENT_COMMIT=$(printf 'a%.0s' {1..40})
    bash $W/peer/init-lineage.sh >/dev/null 2>&1
    s=$(date +%s.%N); GENERATIONS=$N MODEL_PROVIDER=openai OPENAI_API_KEY=x bash $W/peer/kernel.sh > $W/orig$r.log 2>&1; rc=$?
    e=$(date +%s.%N); echo "original round $r: rc=$rc $(per_gen $s $e) s/gen; $(git -C $L log --format=%s | head -3 | tr '\n' '|')" ) | tee -a $W/results
  mkdir -p $W/o$r/specs; cat > $W/o$r/specs/x.yaml <<Y
apiVersion: ouro/v1
kind: Lineage
metadata: {name: x$r}
spec:
  generations: $N
  model: {provider: echo}
  ceilings: {cpu: ${CPU:-600s}}
  storage: {path: ../l/x$r}
Y
  s=$(date +%s.%N); (cd $W/o$r && $OURO apply --yes specs/ > $W/ouro$r.log 2>&1); rc=$?; e=$(date +%s.%N)
  echo "ouro     round $r: rc=$rc $(per_gen $s $e) s/gen (whole apply incl. plan+verify)" | tee -a $W/results
done
python3 - $W/results <<'PY'
import re, statistics, sys
rows = open(sys.argv[1]).read().splitlines()
pick = lambda who: [float(re.search(r"rc=\d+ ([\d.]+) s/gen", r).group(1)) for r in rows if r.startswith(who)]
orig, ouro = statistics.median(pick("original")), statistics.median(pick("ouro"))
print(f"median s/gen: original {orig:.3f}, ouro {ouro:.3f}: ouro is {orig / ouro:.1f}x faster per generation (target >= 6x, issue 37)")
PY
