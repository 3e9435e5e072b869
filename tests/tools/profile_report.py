"""The tables of tests/profile.sh: the build from ninja's log, each test from what
tests/tools/profile_test.sh wrote (perf stat per 250 ms interval, wall clock, exit status)."""

import argparse
import collections
import os
import re
import subprocess

IDLE_CORES = 0.05  # an interval in which the test's processes used under 5 % of a core is a wait


def ninja_steps(build):
    """output -> (start s, end s) of the last build, from .ninja_log (v5: start end mtime output hash)."""
    steps = {}
    with open(os.path.join(build, ".ninja_log")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            start, end, _, output, _ = line.rstrip("\n").split("\t")
            steps[output] = (int(start) / 1000, int(end) / 1000)
    return steps


def ninja_inputs(build, output):
    """Every input of the edge that makes `output` (explicit, implicit and order-only)."""
    text = subprocess.run(["ninja", "-C", build, "-t", "query", output], capture_output=True, text=True).stdout
    inputs, section = [], None
    for line in text.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("input:") or stripped == "outputs:":
            section = "in" if stripped.startswith("input:") else "out"
            continue
        if section == "in" and stripped:
            inputs.append(stripped.lstrip("|").strip())
    return inputs


def report_build(build, configure_s, build_s):
    steps = ninja_steps(build)
    print(f"\n## Build: configure {configure_s:.0f} s, build {build_s:.0f} s, {len(steps)} steps\n")
    objects = {o: e - s for o, (s, e) in steps.items() if o.endswith(".o")}
    unity = sorted(((d, o) for o, d in objects.items() if "unity_" in o), reverse=True)
    print(f"Unity batches ({len(unity)}, {sum(d for d, _ in unity):.0f} s of compile in all):")
    for d, o in unity:
        print(f"  {d:6.1f} s  {o}")
    others = sorted(((d, o) for o, d in objects.items() if "unity_" not in o), reverse=True)
    print(f"Other objects ({len(others)}, {sum(d for d, _ in others):.0f} s in all), the 15 slowest:")
    for d, o in others[:15]:
        print(f"  {d:6.1f} s  {o}")
    links = sorted(((e - s, o) for o, (s, e) in steps.items() if not o.endswith((".o", ".gch", ".pch"))), reverse=True)
    print(f"Links and other steps ({len(links)}, {sum(d for d, _ in links):.0f} s in all), the 10 slowest:")
    for d, o in links[:10]:
        print(f"  {d:6.1f} s  {o}")
    # Critical path: from the step that ended last, back through the input that ended last.
    out = max(steps, key=lambda o: steps[o][1])
    path = []
    while out:
        path.append(out)
        inputs = [i for i in ninja_inputs(build, out) if i in steps and i not in path]
        out = max(inputs, key=lambda i: steps[i][1]) if inputs else None
    print("Critical path (start -> end, each step's own time):")
    for o in reversed(path):
        s, e = steps[o]
        print(f"  {s:6.1f} -> {e:6.1f} s  {e - s:6.1f} s  {o}")


def read_perf(path):
    """(cpu seconds, forks, execs, idle seconds, [per-interval cores]) from a perf stat -I -x, file."""
    cpu = forks = execs = idle = 0.0
    previous = 0.0
    per_interval = collections.OrderedDict()
    with open(path) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) < 4 or line.startswith("#"):
                continue
            t, value, _, event = float(fields[0]), fields[1], fields[2], fields[3]
            count = 0.0 if value.startswith("<") else float(value)
            if event == "task-clock":
                cpu += count / 1000
                per_interval[t] = count / 1000
            elif event.endswith("process_fork"):
                forks += count
            elif event.endswith("process_exec"):
                execs += count
    for t, used in per_interval.items():
        span = t - previous
        previous = t
        if span > 0 and used < IDLE_CORES * span:
            idle += span
    return cpu, int(forks), int(execs), idle


def report_tests(perf_dir, ctest_s, ctest_log):
    rows = []
    for name in os.listdir(perf_dir):
        if not name.endswith(".wall"):
            continue
        test = name[: -len(".wall")]
        start, end, status = open(os.path.join(perf_dir, name)).read().split()
        cpu, forks, execs, idle = read_perf(os.path.join(perf_dir, test + ".perf"))
        wall = float(end) - float(start)
        rows.append((wall, test, cpu, forks, execs, idle, int(status), float(start), float(end)))
    if not rows:
        print("\nNo test ran under the profiler.")
        return
    rows.sort(reverse=True)
    first = min(r[7] for r in rows)
    last = max(r[8] for r in rows)
    print(f"\n## Tests: ctest {ctest_s:.0f} s wall, {len(rows)} tests, "
          f"{sum(r[0] for r in rows):.0f} s of test time, {sum(r[2] for r in rows):.0f} s of CPU\n")
    print(f"{'test':42} {'wall s':>7} {'cpu s':>7} {'cores':>5} {'forks':>6} {'execs':>6} {'waited s':>8} status")
    for wall, test, cpu, forks, execs, idle, status, _, _ in rows:
        print(f"{test:42} {wall:7.1f} {cpu:7.1f} {cpu / wall if wall else 0:5.2f} {forks:6d} {execs:6d} "
              f"{idle:8.1f} {status}")
    # Time when only RUN_SERIAL tests ran (nothing beside them): from the ctest log's order is not
    # enough, so count the wall-clock seconds covered by exactly one running test.
    events = sorted([(r[7], 1) for r in rows] + [(r[8], -1) for r in rows])
    running, t_prev, alone, none = 0, first, 0.0, 0.0
    for t, d in events:
        if running == 1:
            alone += t - t_prev
        elif running == 0:
            none += t - t_prev
        running += d
        t_prev = t
    print(f"\nFirst test start to last test end: {last - first:.0f} s; one test running alone: {alone:.0f} s; "
          f"none running (ctest between tests): {none:.0f} s")
    failed = re.findall(r"^\s*\d+ - (\S+) \(Failed\)", open(ctest_log).read(), re.M) if ctest_log else []
    if failed:
        print("Failed: " + " ".join(failed))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", required=True)
    p.add_argument("--perf", required=True)
    p.add_argument("--configure", type=float, default=0)
    p.add_argument("--build-s", type=float, default=0)
    p.add_argument("--ctest-s", type=float, default=0)
    p.add_argument("--ctest-log")
    p.add_argument("--tests-only", action="store_true")
    a = p.parse_args()
    if not a.tests_only:
        report_build(a.build, a.configure, a.build_s)
    report_tests(a.perf, a.ctest_s, a.ctest_log)


if __name__ == "__main__":
    main()
