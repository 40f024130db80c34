#!/bin/sh
# ouro kernel: the runner, the first process of a generation inside the sandbox.
# Trusted harness; mounted read-only at /kernel/runner.sh, never writable.
#
# stdout is the result channel and nothing else writes to it: the organism's
# stdout goes to stderr. The result (a tar of /work) is written only when the
# organism exits 0; the runner exits with the organism's status (or tar's, if
# archiving /work fails, so that a partial archive can never publish).
set -u
umask 022
if ! tar -C /work -xf /kernel/input.tar; then
  echo "runner: cannot unpack the committed tree into /work" >&2
  exit 125
fi
# sh exports PWD; the organism's environment is exactly HOME and PATH (unset here,
# not by env(1): one program fewer in every life).
unset PWD
emacs -Q --batch -l /work/organism.el >&2 </dev/null
status=$?
# The life is over: nothing it started lives on to change /work while it is archived
# (kill -1 reaches every process of this pid namespace but init and ourselves).
kill -9 -1 2>/dev/null
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
exec tar -C /work --format=gnu --sort=name --numeric-owner --owner=0 --group=0 \
  --hard-dereference -cf - .
