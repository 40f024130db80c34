# The size probe: organism.el plus noise.txt (absent: 0), in bytes.
printf '{"bytes": %d}' "$(cat organism.el noise.txt 2>/dev/null | wc -c)"
