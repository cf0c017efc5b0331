# The summary of bench/edges.sh, from its results.tsv (tab-separated:
# round, edge, node figure, bare figure, node cores, bare cores, load).
#
# One line per edge: each round's node and bare figures (summed over its
# pairs; for the p50 row, their mean), their ratio, the worst and best
# round (for the p50 row, node minus bare in us), and whether the worst
# round meets the edge's target (docs/performance.md, "At a glance").
# The verdict is taken on the unrounded ratio: a round at 0.8999 prints
# as 0.900 and is a miss.
#
#   awk -F'\t' -f bench/edges-summary.awk target/edges/results.tsv

# An edge's target, or "" for a row that compares without one.
function target(edge) {
    if (edge ~ /p50/) return "<= +10 us"
    if (edge ~ /vs |counting/) return ""
    return ">= 0.9"
}

function verdict(edge, worst) {
    if (target(edge) == "") return "-"
    if (edge ~ /p50/) return (worst <= 10 ? "met" : "MISSED")
    return (worst >= 0.9 ? "met" : "MISSED")
}

{
    key = $2
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    rk = $1 SUBSEP key
    if (!(rk in pairs)) rounds[key] = rounds[key] " " $1
    pairs[rk]++; node[rk] += $3; bare[rk] += $4
    if ($3 > 0 && $4 > 0) { ncpu[rk] += $5 / $3 * 1e6; bcpu[rk] += $6 / $4 * 1e6 }
}

END {
    printf "\n%-32s %-8s %-8s %-17s %s\n", "edge", "worst", "best", "target", "node/bare per round"
    for (i = 1; i <= n; i++) {
        k = order[i]; split(substr(rounds[k], 2), rs, " "); cells = ""; lo = ""; hi = ""
        for (j = 1; j in rs; j++) {
            rk = rs[j] SUBSEP k
            if (k ~ /p50/) { a = node[rk] / pairs[rk]; b = bare[rk] / pairs[rk]; r = a - b }
            else { a = node[rk]; b = bare[rk]; r = (b > 0 ? a / b : 0) }
            cells = cells sprintf("  %.0f/%.0f", a, b)
            if (lo == "" || r < lo) lo = r
            if (hi == "" || r > hi) hi = r
        }
        t = target(k); v = verdict(k, k ~ /p50/ ? hi : lo)
        goal = (t == "" ? "-" : t " " v)
        if (k ~ /p50/) printf "%-32s %+-8.1f %+-8.1f %-17s %s (us, node minus bare)\n", k, hi, lo, goal, cells
        else printf "%-32s %-8.3f %-8.3f %-17s %s\n", k, lo, hi, goal, cells
    }
    printf "\nserver CPU per request in us, node/bare per round (the generator shares the cores):\n"
    for (i = 1; i <= n; i++) {
        k = order[i]; if (k ~ /p50/) continue
        split(substr(rounds[k], 2), rs, " "); cells = ""
        for (j = 1; j in rs; j++) {
            rk = rs[j] SUBSEP k
            cells = cells sprintf("  %.1f/%.1f", ncpu[rk] / pairs[rk], bcpu[rk] / pairs[rk])
        }
        printf "%-32s %s\n", k, cells
    }
}
