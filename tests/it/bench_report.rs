//! The benchmark report's arithmetic (`bench/lib/report.py`, `bench/lib/code_lines.py`,
//! `bench/lib/phases.py`, `bench/lib/cpu_row.py`, `bench/lib/machine_load.py`), run on made-up
//! raw outputs whose answers are known: a wrong split, a thread counted in the wrong part, a
//! call's cost taken for an instruction's or a phase cut at the wrong system call changes a
//! figure these tests read.

use std::path::Path;
use std::process::Command;

fn python(script: &str, args: &[&Path], extra: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3").arg(root.join(script)).args(args).args(extra).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn wrk_json(requests: u64) -> String {
    format!(
        r#"{{"requests":{requests},"duration_us":5000000,"bytes":1,"rps":{:.1},"errors":{{"connect":0,"read":0,"write":0,"status":0,"timeout":0}},"latency_us":{{"p50":1,"p90":1,"p99":1,"mean":1.0,"max":1}}}}"#,
        requests as f64 / 5.0
    )
}

fn stream_round(stall_free: u64, median_gap_ms: f64) -> String {
    format!(
        r#"{{"streams":1024,"completed":1024,"stall_free":{stall_free},"stalled":{},"max_gap_ms":{{"p50":{median_gap_ms},"p99":40.0,"max":50.0}}}}"#,
        1024 - stall_free
    )
}

#[test]
fn the_report_splits_each_proxys_cpu_per_request_by_thread_and_gives_each_rounds_median_gap() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path();
    let write = |name: &str, text: &str| std::fs::write(res.join(name), text).unwrap();
    // 100,000 requests a pass; at 100 ticks a second one tick is 10 ms, 0.1 µs a request.
    for t in ["floor", "ccmesh", "ccmesh_conv"] {
        write(&format!("throughput.d0.{t}.json"), &wrk_json(100_000));
        write(&format!("throughput.d0.{t}.2.json"), &wrk_json(100_000));
    }
    // The floor's two threads share a name: 90 user and 110 kernel ticks between them.
    write(
        "throughput.d0.floor.2.threads.txt",
        "clk_tck 100\nbefore bare_proxy 100 200\nbefore bare_proxy 100 200\n\
         before load wrk 1000\nbefore load mock 500\nbefore load machine 10000 3000\n\
         after load wrk 1060\nafter load mock 570\nafter load machine 10980 3040\n\
         after bare_proxy 150 260\nafter bare_proxy 140 250\n",
    );
    // Serving threads 110 / 110 ticks, the writer 20 / 10, the main thread nothing.
    write(
        "throughput.d0.ccmesh.2.threads.txt",
        "clk_tck 100\nbefore ccmesh 1 0\nbefore ccmesh-records 10 5\nbefore ccmesh-worker-0 100 100\nbefore ccmesh-worker-1 100 100\n\
         before load wrk 2000\nbefore load mock 900\nbefore load machine 20000 5000\n\
         after load wrk 2070\nafter load mock 980\nafter load machine 20960 5060\n\
         after ccmesh 1 0\nafter ccmesh-records 30 15\nafter ccmesh-worker-0 160 150\nafter ccmesh-worker-1 150 160\n",
    );
    write("repeat1024.1.floor.json", &stream_round(1024, 28.5));
    write("repeat1024.1.ccmesh.json", &stream_round(897, 33.5));
    let outputs = tempfile::tempdir().unwrap();
    let (json, md) = (outputs.path().join("out.json"), outputs.path().join("out.md"));
    python("bench/lib/report.py", &[res, &json, &md], &[]);

    let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let split = &result["cpu_per_request_d0"];
    let close = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;
    assert!(close(&split["floor"][0]["serving"]["user"], 9.0), "{split}");
    assert!(close(&split["floor"][0]["serving"]["kernel"], 11.0), "{split}");
    assert!(close(&split["ccmesh"][0]["serving"]["user"], 11.0), "{split}");
    assert!(close(&split["ccmesh"][0]["serving"]["kernel"], 11.0), "{split}");
    assert!(close(&split["ccmesh"][0]["writer"]["user"], 2.0), "{split}");
    assert!(close(&split["ccmesh"][0]["writer"]["kernel"], 1.0), "{split}");
    assert!(close(&split["ccmesh"][0]["other"]["user"], 0.0), "{split}");
    assert!(split["ccmesh_conv"][0].is_null(), "a pass without ticks has no split: {split}");

    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("| floor: bare hyper proxy (examples/bare_proxy.rs) | 9.0 / 11.0 | – | – | 20.0 | 1.00× |"),
        "{md}"
    );
    assert!(md.contains("| ccmesh | 11.0 / 11.0 | 2.0 / 1.0 | 0.0 / 0.0 | 25.0 | 1.25× |"), "{md}");
    // The load's ticks: the floor's pass wrk 60 (6 µs), the mock 70, busy 980 of 1,020; ccmesh's
    // wrk 70, the mock 80, busy 960 of 1,020.
    assert!(
        md.contains("| floor: bare hyper proxy (examples/bare_proxy.rs) | 20.0 | 6.0 | 7.0 | 33.0 | 96.1 % |"),
        "{md}"
    );
    assert!(md.contains("| ccmesh | 25.0 | 7.0 | 8.0 | 40.0 | 94.1 % |"), "{md}");
    let loads = &result["load_per_request_d0"];
    assert!(close(&loads["ccmesh"][0]["wrk"], 7.0), "{loads}");
    assert!(close(&loads["ccmesh"][0]["busy"], 960.0 / 1020.0), "{loads}");
    assert!(loads["ccmesh_conv"][0].is_null(), "a pass without ticks has no load: {loads}");
    assert!(md.contains("897 (0 of 1 rounds all 1024); the median stream's largest gap 33.5 ms"), "{md}");
    assert!(
        md.contains(
            "ccmesh 897; the floor 1024 (the median stream's largest gap per round: ccmesh 33.5 ms, the floor 28.5 ms)"
        ),
        "{md}"
    );
}

/// One thread's profile: `(address, count)` pairs of one function, and a call whose inclusive
/// cost (`call.1`) sits at the call site's address (`call.0`).
fn profile(function: &str, instructions: &[(u64, u64)], call: Option<(u64, u64)>) -> String {
    let mut text = format!(
        "# callgrind format\nversion: 1\npositions: instr line\nevents: Ir\nob=(1) /bin/proxy\nfl=(1) a.rs\nfn=(1) {function}\n"
    );
    for (addr, count) in instructions {
        text.push_str(&format!("0x{addr:x} 1 {count}\n"));
    }
    if let Some((site, cost)) = call {
        text.push_str(&format!("cfn=(2) callee\ncalls=1 0x9000 1\n0x{site:x} 1 {cost}\n"));
    }
    text
}

#[test]
fn code_lines_counts_the_lines_a_request_runs_and_the_writers_share() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    // Serving thread: 0x1000 and 0x1004 share a line and run every request; 0x1040 every other
    // one (it counts); 0x2000 only at start-up (it does not). The call made every request from
    // 0x1080 costs its callee's instructions, not this function's: counted, it would add a line.
    let serving =
        |n: u64| profile("serve", &[(0x1000, n), (0x1004, n), (0x1040, n / 2), (0x2000, 5)], Some((0x1080, 40 * n)));
    // The writer's thread: one line, every request.
    let writer = |n: u64| profile("ccmesh::observe::writer::Worker::write", &[(0x5000, n)], None);
    for (n, pid) in [(200, 111), (1200, 222)] {
        std::fs::write(p.join(format!("x.{n}.body.{pid}-01")), serving(n)).unwrap();
        std::fs::write(p.join(format!("x.{n}.body.{pid}-02")), writer(n)).unwrap();
    }
    let out = python("bench/lib/code_lines.py", &[&p.join("x.200.body"), &p.join("x.1200.body")], &["200", "1200"]);
    assert_eq!(out.trim(), "3 1");
}

/// One system call as `perf script --ns -F tid,time,event,trace` prints it: entered at `enter_us`
/// (µs after a base time) on `fd`, returned `ret` at `exit_us`.
fn syscall(nr: u32, fd: u32, ret: i64, enter_us: f64, exit_us: f64) -> String {
    let at = |us: f64| format!("{:.9}", 41_230.0 + us / 1e6);
    format!(
        " 6536 {}: raw_syscalls:sys_enter: NR {nr} ({fd:x}, 7fb5c00697f0, 2000, 0, 0, 0)\n 6536 {}:  raw_syscalls:sys_exit: NR {nr} = {ret}\n",
        at(enter_us),
        at(exit_us)
    )
}

#[test]
fn the_phases_of_a_request_are_cut_at_its_system_calls() {
    const RECVFROM: u32 = 45;
    const WRITEV: u32 = 20;
    const SENDTO: u32 = 44;
    const EPOLL_WAIT: u32 = 232;
    let (client, upstream, other_upstream) = (7, 9, 11);
    let mut trace = String::new();
    // Two requests, the second 100 µs after the first, every phase a different length in each.
    for (base, stretch) in [(0.0, 1.0), (100.0, 2.0)] {
        let t = |us: f64| base + us * stretch;
        trace += &syscall(EPOLL_WAIT, 10, 1, t(0.0), t(1.0));
        trace += &syscall(EPOLL_WAIT, 10, 0, t(2.0), t(2.2)); // a look that found nothing new
        trace += &syscall(RECVFROM, client, 200, t(3.0), t(4.0)); // woken 2
        trace += &syscall(RECVFROM, client, -11, t(4.5), t(4.6)); // nothing more: no phase
        trace += &syscall(WRITEV, upstream, 200, t(11.0), t(15.0)); // to_upstream 7, write 4
        trace += &syscall(EPOLL_WAIT, 10, 1, t(16.0), t(40.0));
        trace += &syscall(RECVFROM, upstream, 300, t(41.0), t(45.0)); // upstream wait 30
        trace += &syscall(SENDTO, client, 300, t(50.0), t(56.0)); // to_client 5, write 6
        trace += &syscall(EPOLL_WAIT, 10, 0, t(59.0), t(59.5)); // after_answer 3
    }
    // A write on another pooled connection to the upstream, once: not the upstream's.
    trace += &syscall(WRITEV, other_upstream, 10, 300.0, 301.0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.txt");
    std::fs::write(&path, trace).unwrap();
    let out = python("bench/lib/phases.py", &[&path], &[&format!("{other_upstream},{upstream}")]);
    let phases: serde_json::Value = serde_json::from_str(&out).unwrap();
    for (phase, first) in [
        ("woken", 2.0),
        ("to_upstream", 7.0),
        ("upstream_write", 4.0),
        ("upstream_wait", 30.0),
        ("to_client", 5.0),
        ("client_write", 6.0),
        ("after_answer", 3.0),
    ] {
        let p = &phases[phase];
        assert_eq!(p["n"], 2, "{phase}: {phases}");
        // Rounding to the nanosecond in the trace leaves a few thousandths of a µs.
        let near = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 0.01;
        assert!(near(&p["mean"], first * 1.5), "{phase}: {p}");
        assert!(near(&p["p50"], first * 2.0), "{phase}: {p}");
        assert!(near(&p["p99"], first * 2.0), "{phase}: {p}");
    }
}

#[test]
fn a_cpu_pass_row_gives_each_threads_and_the_loads_cpu_per_request_and_the_busy_share() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    // 50,000 requests in the 5 s window (10,000/s).
    let wrk = file("wrk.out", &format!("Running 7s test\n{}\n", wrk_json(50_000)));
    // Two serving threads at 600 ms and 400 ms, the writer at 100 ms: 20 + 2 µs per request.
    let perf = file(
        "perf.txt",
        " Performance counter stats for process id '1':\n\n\
         \x20    ccmesh-worker-0-11        600.00 msec task-clock   #  0.1 CPUs utilized\n\
         \x20    ccmesh-worker-1-12        400.00 msec task-clock   #  0.1 CPUs utilized\n\
         \x20    ccmesh-records-13         100.00 msec task-clock   #  0.1 CPUs utilized\n\
         \x20    ccmesh-worker-0-11          5000      context-switches   #  1 /sec\n\
         \x20    ccmesh-records-13           2500      context-switches   #  1 /sec\n\
         \x20    ccmesh-worker-1-12        200000      raw_syscalls:sys_enter   #  1 M/sec\n",
    );
    // 100 ticks a second: wrk 40 ticks (400 ms, 8 µs per request), the mock 35 (7 µs); the
    // machine busy 960 of 1,000 ticks.
    let before = file("load.before", "load wrk 1000\nload mock 2000\nload machine 50000 9000\n");
    let after = file("load.after", "load wrk 1040\nload mock 2035\nload machine 50960 9040\n");
    let passes = dir.path().join("passes.jsonl");
    let missing = dir.path().join("no-dso.txt");
    let window = Path::new("5");
    let args: [&Path; 10] = [
        Path::new("3"),
        Path::new("ccmesh"),
        window,
        &wrk,
        &perf,
        &missing,
        &passes,
        &before,
        &after,
        Path::new("100"),
    ];
    let row = python("bench/lib/cpu_row.py", &args, &[]);
    assert_eq!(
        row.trim(),
        "| 3 | ccmesh | 10000 | ccmesh-records 2.0, workers 20.0 | 22.0 | 0.15 | 4.00 | 8.0 / 7.0 | 96 % |"
    );
    let line: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&passes).unwrap().trim()).unwrap();
    assert_eq!(line["round"], 3);
    assert_eq!(line["target"], "ccmesh");
    assert!((line["us"].as_f64().unwrap() - 22.0).abs() < 1e-9, "{line}");
}
