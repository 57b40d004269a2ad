//! The DCGM exporter's page against tests/fixtures/dcgm (written from the
//! exporter's documentation; its .source.txt says from where), every
//! figure worked by hand in a comment.

use super::*;
use crate::probe::prometheus::parse;

fn fixture() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/dcgm/dcgm_exporter_2gpu.prom"
    );
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

const HOST: &str = "dcgm-exporter-5kq2n";
const UUID0: &str = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52";
const UUID1: &str = "GPU-3a4e8b1c-77f2-4d0b-9c55-1e2f6a7b8c9d";

#[test]
fn the_fixture_is_two_gpus_by_host_and_uuid() {
    let gpus = parse_dcgm(&parse(&fixture()));
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].id, format!("{HOST}/{UUID0}"));
    assert_eq!(gpus[1].id, format!("{HOST}/{UUID1}"));
    assert_eq!(
        gpus[0].reading,
        GpuReading {
            utilization_pct: Some(90.0),
            memory_used_mib: Some(70_000.0),
            // used 70000 + free 10998 + reserved 561
            memory_total_mib: Some(81_559.0),
            power_w: Some(301.5),
            sm_clock_mhz: Some(1755.0),
            // No DCGM_FI_DEV_MAX_SM_CLOCK on the page.
            sm_clock_max_mhz: None,
            temperature_c: Some(71.0),
            energy_mj: Some(123_456_789_012.0),
            // 0x4: the software power cap.
            clock_event_reasons: Some(4),
        }
    );
    assert_eq!(
        gpus[1].reading,
        GpuReading {
            utilization_pct: Some(70.0),
            memory_used_mib: Some(40_000.0),
            // 40000 + 40998 + 561
            memory_total_mib: Some(81_559.0),
            power_w: Some(298.5),
            sm_clock_mhz: Some(1980.0),
            sm_clock_max_mhz: None,
            temperature_c: Some(66.0),
            energy_mj: Some(98_765_432_109.0),
            clock_event_reasons: Some(0),
        }
    );
}

#[test]
fn the_fixture_aggregates_as_nvidia_smi_would() {
    let mut meter = EnergyMeter::default();
    let Some(g) = page_gauges(&parse(&fixture()), &mut meter) else {
        panic!("the fixture holds GPUs");
    };
    assert_eq!(g.get("gpu_count"), Some(&2.0));
    // (90 + 70) / 2
    assert_eq!(g.get("gpu_util_pct"), Some(&80.0));
    // 70000 + 40000; 81559 x 2
    assert_eq!(g.get("gpu_mem_used_mib"), Some(&110_000.0));
    assert_eq!(g.get("gpu_mem_total_mib"), Some(&163_118.0));
    // 301.5 + 298.5
    assert_eq!(g.get("gpu_power_w"), Some(&600.0));
    // No maximum clock: no ratio rather than one against a guess.
    assert_eq!(g.get("gpu_sm_clock_ratio"), None);
    // max(71, 66)
    assert_eq!(g.get("gpu_temp_c"), Some(&71.0));
    // GPU 0 at its power cap (0x4), GPU 1 nothing.
    assert_eq!(g.get("gpu_clocks_power_cap"), Some(&1.0));
    assert_eq!(g.get("gpu_clocks_thermal"), Some(&0.0));
    assert_eq!(g.get("gpu_clocks_hw_slowdown"), Some(&0.0));
    // The first page starts the energy total at 0, no break.
    assert_eq!(g.get(ENERGY_J), Some(&0.0));
    assert_eq!(g.get(ENERGY_BREAKS), Some(&0.0));
}

#[test]
fn a_max_clock_an_old_reasons_name_and_fb_total_are_read() {
    let page = r#"
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 95
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a"} 1500
DCGM_FI_DEV_MAX_SM_CLOCK{gpu="0",UUID="GPU-a"} 2000
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-a"} 96
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 100
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a"} 200
DCGM_FI_DEV_FB_TOTAL{gpu="0",UUID="GPU-a"} 1000
"#;
    let gpus = parse_dcgm(&parse(page));
    assert_eq!(gpus.len(), 1);
    let r = gpus[0].reading;
    assert_eq!(r.sm_clock_max_mhz, Some(2000.0));
    // FB_TOTAL wins over used + free.
    assert_eq!(r.memory_total_mib, Some(1000.0));
    // 96 = 0x40 | 0x20: hardware and software thermal.
    assert_eq!(r.clock_event_reasons, Some(96));
    let mut g = BTreeMap::new();
    gpu_gauges(&[r], &mut g);
    // 1500 / 2000 while busy (95 %).
    assert_eq!(g.get("gpu_sm_clock_ratio"), Some(&0.75));
    assert_eq!(g.get("gpu_clocks_thermal"), Some(&1.0));
    assert_eq!(g.get("gpu_clocks_power_cap"), Some(&0.0));
}

#[test]
fn blanks_duplicates_hosts_and_other_pages() {
    let page = r#"
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n1"} 140737488355328
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="n1"} 2147483632
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",GPU_I_ID="1"} 10
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",GPU_I_ID="2"} 99
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a",Hostname="n1"} 3000000000
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b",Hostname="n2"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b",Hostname="n2"} NaN
DCGM_FI_DEV_COUNT 2
go_goroutines 42
"#;
    let gpus = parse_dcgm(&parse(page));
    assert_eq!(gpus.len(), 2, "one GPU on each node");
    let a = gpus[0].reading;
    // DCGM's fp64 and int32 blanks are "no value".
    assert_eq!(a.power_w, None);
    assert_eq!(a.temperature_c, None);
    // A field repeated with more labels (MIG instances) counts once: the first.
    assert_eq!(a.utilization_pct, Some(10.0));
    // 3e9 mJ is past int32's blanks and still a real counter.
    assert_eq!(a.energy_mj, Some(3e9));
    assert_eq!(gpus[1].id, "n2/GPU-b");
    assert_eq!(gpus[1].reading.utilization_pct, Some(50.0));
    // Not a DCGM page; HTML; nothing.
    assert!(parse_dcgm(&parse("vllm:num_requests_running 3\n")).is_empty());
    assert!(parse_dcgm(&parse("<!doctype html><html><body>hi</body></html>")).is_empty());
    assert!(parse_dcgm(&parse("")).is_empty());
    let mut meter = EnergyMeter::default();
    assert_eq!(page_gauges(&parse("<html></html>"), &mut meter), None);
}

#[test]
fn the_energy_meter_adds_what_each_counter_grew() {
    let page = |pairs: &[(&str, f64)]| -> Vec<(String, f64)> {
        pairs.iter().map(|(id, mj)| (id.to_string(), *mj)).collect()
    };
    let mut m = EnergyMeter::default();
    // First page: the baseline, 0 J.
    assert_eq!(
        m.add(&page(&[("a", 1000.0), ("b", 5000.0)])),
        Some((0.0, 0))
    );
    // a +3000 mJ, b +4000 mJ: 7 J.
    assert_eq!(
        m.add(&page(&[("a", 4000.0), ("b", 9000.0)])),
        Some((7.0, 0))
    );
    // The same values again: a page the exporter has not refreshed.
    assert_eq!(m.add(&page(&[("a", 4000.0), ("b", 9000.0)])), None);
    // a went down (a reset): a break, the total stays at 7 J.
    assert_eq!(
        m.add(&page(&[("a", 2000.0), ("b", 10000.0)])),
        Some((7.0, 1))
    );
    // From the new baseline: a +1000, b +500 = 1.5 J, 8.5 J in all.
    assert_eq!(
        m.add(&page(&[("a", 3000.0), ("b", 10500.0)])),
        Some((8.5, 1))
    );
    // b is gone: the sum no longer covers the same GPUs, a break.
    assert_eq!(m.add(&page(&[("a", 4000.0)])), Some((8.5, 2)));
    // A page without the counter says nothing of energy.
    assert_eq!(m.add(&[]), None);
}

#[test]
fn the_one_line_names_the_cause() {
    let t = Duration::from_secs(2);
    assert_eq!(
        why_not(Ok(b"  <!DOCTYPE html><html>"), t),
        "no DCGM metrics there (answered HTML)"
    );
    assert!(why_not(Ok(b"vllm:num_requests_running 1"), t).contains("no DCGM_FI_DEV_"));
    assert_eq!(
        why_not(Err(FetchError::Status(404)), t),
        "no DCGM metrics there (answered HTTP 404)"
    );
    assert_eq!(why_not(Err(FetchError::Timeout), t), "no answer within 2 s");
    assert!(why_not(Err(FetchError::Connect), t).contains("connection refused"));
    assert!(why_not(Err(FetchError::TooLarge), t).contains("over 4 MiB"));
}
