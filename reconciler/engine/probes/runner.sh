#!/bin/sh
# ouro probe runner: the first process of a measurement inside its sandbox.
# Trusted harness; mounted read-only at /kernel/probe.sh with the generation's tree.
# stdout is the probe's own (its metrics); it exits with the probe's status.
set -u
umask 022
if ! tar -C /work -xf /kernel/input.tar; then
  echo "probe: cannot unpack the generation's tree into /work" >&2
  exit 125
fi
env -u PWD "$@" </dev/null
status=$?
# The measurement is over: nothing it started lives on (this is the pid namespace's init).
kill -9 -1 2>/dev/null
exit "$status"
