use super::*;

#[test]
fn min_with_takes_the_smaller_amount_of_each_resource() {
    let mut a = Resources::new()
        .with("cpu", 2000)
        .with("memory", 100)
        .with("nvidia.com/gpu", 2)
        .with("example.com/fpga", 1);
    let b = Resources::new()
        .with("cpu", 3000)
        .with("memory", 50)
        .with("nvidia.com/gpu", 1);
    a.min_with(&b);
    assert_eq!(
        a,
        Resources::new()
            .with("cpu", 2000)
            .with("memory", 50)
            .with("nvidia.com/gpu", 1)
    );
    assert_eq!(
        a.get("example.com/fpga"),
        0,
        "absent from the other side: zero"
    );
}

fn res(items: &[(&str, &str)]) -> Resources {
    Resources::from_quantities(items.iter().copied()).unwrap()
}

#[test]
fn parses_cpu_forms() {
    assert_eq!(parse_milli("500m"), Ok(500));
    assert_eq!(parse_milli("1.5"), Ok(1500));
    assert_eq!(parse_milli("2"), Ok(2000));
    assert_eq!(parse_milli(".5"), Ok(500));
    assert_eq!(parse_milli("2."), Ok(2000));
    assert_eq!(parse_milli("+3"), Ok(3000));
    assert_eq!(parse_milli("0"), Ok(0));
    assert_eq!(parse_milli("-0"), Ok(0));
}

#[test]
fn parses_suffixes_and_exponents() {
    assert_eq!(parse_value("8Gi"), Ok(8 << 30));
    assert_eq!(parse_value("1Ki"), Ok(1024));
    assert_eq!(parse_value("1Ei"), Ok(1 << 60));
    assert_eq!(parse_value("100M"), Ok(100_000_000));
    assert_eq!(parse_value("2k"), Ok(2000));
    assert_eq!(parse_value("1e3"), Ok(1000));
    assert_eq!(parse_value("1E3"), Ok(1000));
    assert_eq!(parse_value("12e-1"), Ok(2)); // 1.2 rounds up
    assert_eq!(parse_value("1.5Gi"), Ok(3 << 29));
    assert_eq!(parse_value("1E"), Ok(1_000_000_000_000_000_000));
    assert_eq!(parse_milli("1e+2"), Ok(100_000));
}

#[test]
fn rounds_fractions_up() {
    assert_eq!(parse_milli("1n"), Ok(1));
    assert_eq!(parse_milli("1u"), Ok(1));
    assert_eq!(parse_milli("1500u"), Ok(2));
    assert_eq!(parse_value("0.1"), Ok(1));
    assert_eq!(parse_value("100m"), Ok(1));
    assert_eq!(parse_value("1000m"), Ok(1));
    assert_eq!(parse_milli("1e-30"), Ok(1));
}

#[test]
fn long_zero_runs_are_exact() {
    assert_eq!(
        parse_value("1.000000000000000000000000000000000000000000"),
        Ok(1)
    );
    assert_eq!(
        parse_value("000000000000000000000000000000000000000000042"),
        Ok(42)
    );
    assert_eq!(
        parse_value(&format!("1{}e-40", "0".repeat(45))),
        Ok(100_000)
    );
}

#[test]
fn rejects_malformed_quantities() {
    for bad in [
        "", "m", ".", "1..2", "1.2.3", "abc", "1K", "1 Gi", " 1", "1e", "1e+", "1Gb", "1iB", "--1",
        "1mm", "1Gi1",
    ] {
        assert!(parse_value(bad).is_err(), "{bad:?} should be rejected");
    }
    assert_eq!(parse_value(""), Err(QuantityError::Empty));
    assert!(matches!(parse_value("1K"), Err(QuantityError::Invalid(s)) if s == "1K"));
}

#[test]
fn rejects_negative_and_out_of_range() {
    assert_eq!(parse_milli("-1"), Err(QuantityError::Negative("-1".into())));
    assert!(matches!(
        parse_value("100Ei"),
        Err(QuantityError::OutOfRange(_))
    ));
    assert!(matches!(
        parse_milli("10E"),
        Err(QuantityError::OutOfRange(_))
    ));
    assert!(matches!(
        parse_value("1e99999"),
        Err(QuantityError::OutOfRange(_))
    ));
    assert!(matches!(
        parse_value("123456789012345678901234567890123456789"),
        Err(QuantityError::OutOfRange(_))
    ));
    assert_eq!(parse_value("18446744073709551615"), Ok(u64::MAX));
    assert!(parse_value("18446744073709551616").is_err());
}

#[test]
fn quantity_accessors() {
    let q = Quantity::parse("-1.5").unwrap();
    assert!(q.is_negative());
    assert_eq!(q.value(), None);
    assert!(Quantity::parse("0.000").unwrap().is_zero());
    assert!(!Quantity::parse("-0").unwrap().is_negative());
}

#[test]
fn formats_round_trip() {
    assert_eq!(format_milli(500), "500m");
    assert_eq!(format_milli(2000), "2");
    assert_eq!(format_milli(0), "0");
    assert_eq!(format_bytes(8 << 30), "8Gi");
    assert_eq!(format_bytes(1536 << 20), "1536Mi");
    assert_eq!(format_bytes(100_000_000), "100M");
    assert_eq!(format_bytes(1023), "1023");
    assert_eq!(format_bytes(0), "0");
    for n in [
        0u64,
        1,
        999,
        1000,
        1024,
        1_000_000,
        3 << 40,
        123_456_789,
        u64::MAX,
    ] {
        assert_eq!(parse_value(&format_bytes(n)), Ok(n), "bytes {n}");
    }
    for m in [0u64, 1, 999, 1000, 1500, 64_000] {
        assert_eq!(parse_milli(&format_milli(m)), Ok(m), "millis {m}");
    }
}

#[test]
fn units_follow_resource_names() {
    assert_eq!(Unit::of("cpu"), Unit::Milli);
    assert_eq!(Unit::of("memory"), Unit::Bytes);
    assert_eq!(Unit::of("hugepages-2Mi"), Unit::Bytes);
    assert_eq!(Unit::of("nvidia.com/gpu"), Unit::Count);
    let r = res(&[
        ("cpu", "250m"),
        ("memory", "1Gi"),
        ("nvidia.com/gpu", "2"),
        ("hugepages-2Mi", "64Mi"),
    ]);
    assert_eq!(r.cpu_millis, 250);
    assert_eq!(r.get("memory"), 1 << 30);
    assert_eq!(r.get("nvidia.com/gpu"), 2);
    assert_eq!(r.get("hugepages-2Mi"), 64 << 20);
    assert_eq!(r.get("example.com/absent"), 0);
}

#[test]
fn add_sub_saturate_and_merge_extended() {
    let a = res(&[
        ("cpu", "1"),
        ("memory", "1Gi"),
        ("a.io/x", "1"),
        ("c.io/z", "5"),
    ]);
    let b = res(&[("cpu", "1500m"), ("b.io/y", "2"), ("c.io/z", "1")]);
    let sum = &a + &b;
    assert_eq!(sum.cpu_millis, 2500);
    assert_eq!(sum.get("a.io/x"), 1);
    assert_eq!(sum.get("b.io/y"), 2);
    assert_eq!(sum.get("c.io/z"), 6);
    let names: Vec<_> = sum.extended().map(|(k, _)| k).collect();
    assert_eq!(names, ["a.io/x", "b.io/y", "c.io/z"]);
    let diff = &a - &b;
    assert_eq!(diff.cpu_millis, 0, "floors at zero");
    assert_eq!(diff.memory_bytes, 1 << 30);
    assert_eq!(diff.get("c.io/z"), 4);
    assert_eq!(diff.get("b.io/y"), 0);
    let big = Resources::new().with(CPU, u64::MAX);
    assert_eq!((&big + &big).cpu_millis, u64::MAX);
}

#[test]
fn equality_treats_absent_as_zero() {
    let a = Resources::new().with("x.io/y", 0);
    assert_eq!(a, Resources::new());
    assert_ne!(Resources::new().with("x.io/y", 1), Resources::new());
    let total: Resources = [res(&[("cpu", "1")]), res(&[("cpu", "2"), ("pods", "3")])]
        .iter()
        .sum();
    assert_eq!(total, res(&[("cpu", "3"), ("pods", "3")]));
}

#[test]
fn fits_checks_every_requested_resource() {
    let node = res(&[
        ("cpu", "4"),
        ("memory", "8Gi"),
        ("pods", "110"),
        ("nvidia.com/gpu", "1"),
    ]);
    assert!(res(&[("cpu", "4"), ("memory", "8Gi")]).fits(&node));
    assert!(!res(&[("cpu", "4001m")]).fits(&node));
    assert!(!res(&[("nvidia.com/gpu", "2")]).fits(&node));
    assert!(!res(&[("example.com/fpga", "1")]).fits(&node));
    assert!(res(&[("example.com/fpga", "0")]).fits(&node));
    assert!(Resources::new().fits(&Resources::new()));
    let req = res(&[("cpu", "5"), ("memory", "1Gi"), ("nvidia.com/gpu", "3")]);
    assert_eq!(req.exceeding(&node), vec!["cpu", "nvidia.com/gpu"]);
}

#[test]
fn max_is_elementwise() {
    let a = res(&[("cpu", "2"), ("memory", "1Gi")]);
    let b = res(&[("cpu", "1"), ("memory", "2Gi"), ("x.io/y", "1")]);
    assert_eq!(
        a.max(&b),
        res(&[("cpu", "2"), ("memory", "2Gi"), ("x.io/y", "1")])
    );
}

#[test]
fn quantities_and_display() {
    let r = res(&[
        ("cpu", "1500m"),
        ("memory", "512Mi"),
        ("pods", "1"),
        ("nvidia.com/gpu", "1"),
    ]);
    let q = r.to_quantities();
    assert_eq!(q["cpu"], "1500m");
    assert_eq!(q["memory"], "512Mi");
    assert_eq!(q["nvidia.com/gpu"], "1");
    assert!(!q.contains_key("ephemeral-storage"));
    assert_eq!(
        r.to_string(),
        "cpu=1500m, memory=512Mi, pods=1, nvidia.com/gpu=1"
    );
    assert_eq!(Resources::new().to_string(), "{}");
}

#[test]
fn serde_round_trip() {
    let r: Resources =
        serde_json::from_str(r#"{"cpu":"2","memory":"1Gi","pods":110,"x.io/y":"3"}"#).unwrap();
    assert_eq!(r.cpu_millis, 2000);
    assert_eq!(r.pods, 110);
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(
        json,
        r#"{"cpu":"2","memory":"1Gi","pods":"110","x.io/y":"3"}"#
    );
    assert!(serde_json::from_str::<Resources>(r#"{"cpu":"lots"}"#).is_err());
}

#[test]
fn pod_requests_max_of_init_and_containers() {
    let spec = PodResourceSpec {
        containers: vec![
            res(&[("cpu", "1"), ("memory", "1Gi")]),
            res(&[("cpu", "500m")]),
        ],
        init_containers: vec![InitContainer {
            requests: res(&[("cpu", "2"), ("memory", "512Mi")]),
            restartable: false,
        }],
        ..Default::default()
    };
    let r = spec.requests();
    assert_eq!(r.cpu_millis, 2000, "init container dominates cpu");
    assert_eq!(r.memory_bytes, 1 << 30, "containers dominate memory");
    assert_eq!(r.pods, 1);
}

#[test]
fn pod_requests_with_sidecars() {
    // sidecar (200m) starts, then an init container (1) runs next to it, then the app (500m).
    let spec = PodResourceSpec {
        containers: vec![res(&[("cpu", "500m")])],
        init_containers: vec![
            InitContainer {
                requests: res(&[("cpu", "200m")]),
                restartable: true,
            },
            InitContainer {
                requests: res(&[("cpu", "1")]),
                restartable: false,
            },
            InitContainer {
                requests: res(&[("cpu", "300m")]),
                restartable: true,
            },
        ],
        overhead: res(&[("cpu", "10m"), ("memory", "64Mi")]),
        ..Default::default()
    };
    let r = spec.requests();
    // init peak = 1 + 200m = 1200m; running = 500m + 200m + 300m = 1000m; + overhead 10m
    assert_eq!(r.cpu_millis, 1210);
    assert_eq!(r.memory_bytes, 64 << 20);
    assert_eq!(r.pods, 1);

    // without the big init container the sum of sidecars and containers wins
    let spec = PodResourceSpec {
        containers: vec![res(&[("cpu", "500m")])],
        init_containers: vec![
            InitContainer {
                requests: res(&[("cpu", "200m")]),
                restartable: true,
            },
            InitContainer {
                requests: res(&[("cpu", "100m")]),
                restartable: false,
            },
        ],
        ..Default::default()
    };
    assert_eq!(spec.requests().cpu_millis, 700);
}

#[test]
fn pod_level_requests_override_containers() {
    let spec = PodResourceSpec {
        containers: vec![res(&[("cpu", "1"), ("memory", "1Gi")])],
        pod_level: PodLevelRequests {
            cpu_millis: Some(3000),
            memory_bytes: None,
        },
        overhead: res(&[("cpu", "100m")]),
        ..Default::default()
    };
    let r = spec.requests();
    assert_eq!(r.cpu_millis, 3100);
    assert_eq!(r.memory_bytes, 1 << 30);
}
