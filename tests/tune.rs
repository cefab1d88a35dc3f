//! `tune` fills a cost cache with one measurement per kernel, resumes without re-measuring, and
//! `explain` reads the measurements back; the cache round-trips through its file.
use std::time::Duration;

use collage_build::report;

mod common;
use collage_build::tune::measure::{self, MeasureBudget};
use collage_build::tune::{CostCache, TargetFingerprint};

#[test]
fn tune_then_explain_reads_every_kernel_back() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mnist/mnist.onnx");
    let g = collage_build::frontend::onnx::load(model.as_ref()).unwrap();
    let c = collage_build::compile_graph(g, "mnist").unwrap();
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let dir = std::env::temp_dir().join(format!("collage-tune-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.toml");
    let budget = quick_budget();
    let mut cache = CostCache::new();
    let mut saves = 0;
    let mut last = (0, 0);
    let n = measure::tune_kernels(
        &c,
        &target,
        &mut cache,
        &dir,
        budget,
        &mut |c| {
            saves += 1;
            c.save(&path).map_err(Into::into)
        },
        &mut |done, total| last = (done, total),
    )
    .unwrap();
    let kernels = report::kernels(&c, &target, None).len();
    assert_eq!(n, kernels);
    assert_eq!(saves, kernels, "saved after every kernel (resumable)");
    assert_eq!(last, (kernels, kernels));
    // Resuming measures nothing new.
    let mut reloaded = CostCache::load_for_target(&path, &target).unwrap();
    let again = measure::tune_kernels(
        &c,
        &target,
        &mut reloaded,
        &dir,
        budget,
        &mut |_| Ok(()),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(again, 0);
    let reports = report::kernels(&c, &target, Some(&reloaded));
    assert!(reports.iter().all(|k| k
        .measured
        .as_ref()
        .is_some_and(|e| e.median_us > 0.0 && e.p90_us >= e.median_us)));
    // Each entry records the plan its kernel ran with: the one printed above the kernel's
    // function for this machine's variant (library calls record the call).
    let printed = common::printed_plans(&c.c_source);
    for k in &reports {
        let plan = &k.measured.as_ref().unwrap().params["plan"];
        if k.backend == "c" {
            assert!(
                printed
                    .iter()
                    .any(|(f, t)| f.starts_with(&format!("k{}", k.id)) && t == plan),
                "k{}: {plan}",
                k.id
            );
        } else {
            assert_eq!(plan, &format!("{} call", k.backend), "k{}", k.id);
        }
    }
    let text = report::render_text(&c.name, &reports);
    assert!(
        text.contains(&format!("over {kernels} of {kernels} kernels")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A build reads the plans a tuning run recorded: a kernel's cached plan is the one its code is
/// generated from; a plan that does not parse, or whose kind does not fit the kernel, is a
/// warning naming the kernel, and the kernel keeps its default plan.
#[test]
fn cached_plans_apply_and_bad_ones_are_warnings() {
    use std::sync::Arc;

    use collage_build::driver::Options;
    use collage_build::ir::{DType, Graph, Tensor, TensorType};
    use collage_build::ops::{Attrs, OpCx};
    use collage_build::tune::{price, Entry};

    let build = || {
        let mut g = Graph::new("mm");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [12, 64])));
        g.inputs.push(x);
        let data: Vec<u8> = (0..64 * 96)
            .flat_map(|i| ((i % 7) as f32 - 3.0).to_le_bytes())
            .collect();
        let ty = TensorType::new(DType::F32, [64, 96]);
        let w = g.add_const("w", Tensor::from_bytes(ty, data).unwrap());
        let y = g.add_value("y", None);
        let op = collage_build::ops::lookup("MatMul").unwrap()(&OpCx {
            attrs: &Attrs::default(),
            opset: 17,
            n_inputs: 2,
            n_outputs: 1,
        })
        .unwrap();
        g.add_node("mm", op, vec![Some(x), Some(w)], vec![y]);
        g.outputs.push(y);
        collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
        g
    };
    let target = TargetFingerprint::current("test");
    let opts = |cache: Option<CostCache>| Options {
        backends: "c".into(),
        cache: cache.map(Arc::new),
        target: Some(target.clone()),
        ..Options::default()
    };
    let plain = collage_build::driver::compile_passed(build(), "t", &opts(None), &target).unwrap();
    let p = &plain.program;
    let id = p
        .buf_ids()
        .find(|&b| p.stage(b).is_some_and(|st| st.reduce.is_some()))
        .unwrap();
    let key = price::kernel_key(p, id, &target);
    let with = |plan: &str| {
        let mut cache = CostCache::new();
        let mut params = std::collections::BTreeMap::new();
        params.insert("plan".to_string(), plan.to_string());
        cache
            .insert(key.clone(), Entry::new(1.0, 1.0, 3, params).unwrap())
            .unwrap();
        collage_build::driver::compile_passed(build(), "t", &opts(Some(cache)), &target).unwrap()
    };
    let default = p
        .plan(id, collage_build::te::Isa::Avx512)
        .unwrap()
        .to_string();
    assert!(default.starts_with("register-blocked vecs=4"), "{default}");
    // A tuned plan: every variant's kernel is generated from it.
    let tuned = "register-blocked vecs=1 rows=2 prefetch=0";
    let c = with(tuned);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let printed = common::printed_plans(&c.c_source);
    let kernel: Vec<&String> = printed
        .iter()
        .filter(|(f, _)| f.starts_with(&format!("k{id}")))
        .map(|(_, t)| t)
        .collect();
    assert_eq!(kernel.len(), 3, "{printed:?}");
    assert!(kernel.iter().all(|t| t.starts_with(tuned)), "{kernel:?}");
    // Bad plans: a warning naming the kernel, and the default plan.
    for (bad, why) in [
        (
            "register-blocked vecs=9 rows=2 prefetch=0",
            "does not parse",
        ),
        ("RegisterBlocked", "does not parse"),
        (
            "depthwise parts=1 band=1 flat=0 chan=0 prefetch=0",
            "no longer fits",
        ),
    ] {
        let c = with(bad);
        assert_eq!(c.warnings.len(), 1, "{bad}: {:?}", c.warnings);
        let w = &c.warnings[0];
        assert!(
            w.contains(&format!("kernel k{id}")) && w.contains(why),
            "{w}"
        );
        assert_eq!(
            c.program
                .plan(id, collage_build::te::Isa::Avx512)
                .unwrap()
                .to_string(),
            default
        );
        assert_eq!(c.c_source, plain.c_source, "{bad}");
    }
}

/// ETO tunes the plans of a model's kernels: the three products below are one family; the
/// first is dominated by the other two, so it is tuned by reuse (or is their source), and the
/// whole tuning takes fewer trials than searching every kernel's top plans. The cache records
/// each kernel's plan, loop nest and provenance; a build reads the plans back, twice the same.
#[test]
fn eto_tunes_plans_by_reuse_and_builds_read_them_back() {
    use collage_build::driver::{self, Options};
    use collage_build::tune::plans::{tune_plans, PlanTuning};
    let dir = std::env::temp_dir().join(format!("collage-eto-test-{}", std::process::id()));
    let g = three_products(&dir);
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let c = driver::compile(g.clone(), "three", &opts).unwrap();
    let budget = quick_budget();
    let mut cache = CostCache::new();
    let mut named = Vec::new();
    // Searching from scratch (k/4 + k/8 = 6 trials) costs more than reusing (2 or 3).
    let settings = PlanTuning {
        top_k: 16,
        ..PlanTuning::default()
    };
    let r = tune_plans(
        &[&c.program],
        "three",
        &target,
        &mut cache,
        &dir.join("work"),
        budget,
        &settings,
        &mut |_| Ok(()),
        &mut |what, _, _| named.push(what.to_string()),
    )
    .unwrap();
    assert_eq!(r.kernels, 3, "{r}");
    assert!(r.reused >= 1 && r.scratch >= 1, "{r}");
    assert!(r.trials < r.exhaustive_trials, "{r}");
    assert!(named.iter().any(|n| n.contains("reusing k")), "{named:?}");
    let entries: Vec<_> = cache.entries_for_target(&target).collect();
    assert_eq!(entries.len(), 3);
    for (_, e) in &entries {
        let tuned = &e.params["tuned"];
        assert!(
            tuned.starts_with("searched, ") || tuned.starts_with("reused from k"),
            "{tuned}"
        );
        assert!(
            e.params["nest"].starts_with("register-blocked"),
            "{:?}",
            e.params
        );
        assert!(e.params["plan"]
            .parse::<collage_build::te::PlanChoice>()
            .is_ok());
    }
    // Resuming tunes nothing again.
    let again = tune_plans(
        &[&c.program],
        "three",
        &target,
        &mut cache,
        &dir.join("work"),
        budget,
        &settings,
        &mut |_| Ok(()),
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!((again.kernels, again.trials, again.already), (0, 0, 3));
    // A build applies the cached plans: each kernel's printed plan is its entry's, and two
    // builds give the same sources.
    let with = Options {
        cache: Some(std::sync::Arc::new(cache.clone())),
        ..opts.clone()
    };
    let a = driver::compile(g.clone(), "three", &with).unwrap();
    let b = driver::compile(g, "three", &with).unwrap();
    assert_eq!(a.c_source, b.c_source);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    let printed = common::printed_plans(&a.c_source);
    for k in report::kernels(&a, &target, Some(&cache)) {
        let plan = &k.measured.as_ref().unwrap().params["plan"];
        assert!(
            printed
                .iter()
                .any(|(f, t)| f.starts_with(&format!("k{}", k.id)) && t == plan),
            "k{}: {plan} not printed: {printed:?}",
            k.id
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel's default plan, measured by `tune`'s first pass (every kernel's cost), is not
/// measured again by plan tuning: the first pass's time stands for it, the searches and the
/// exhaustive baseline count one trial fewer a kernel, and each entry's provenance counts only
/// the plans measured for it.
#[test]
fn defaults_measured_by_the_first_pass_are_not_measured_again() {
    use collage_build::driver::{self, Options};
    use collage_build::tune::plans::{tune_plans, PlanTuning};
    use collage_build::tune::Entry;
    let dir = std::env::temp_dir().join(format!("collage-defaults-test-{}", std::process::id()));
    let g = three_products(&dir);
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let c = driver::compile(g, "three", &opts).unwrap();
    let settings = PlanTuning::default();
    let tune = |cache: &mut CostCache| {
        tune_plans(
            &[&c.program],
            "three",
            &target,
            cache,
            &dir.join("work"),
            quick_budget(),
            &settings,
            &mut |_| Ok(()),
            &mut |_, _, _| {},
        )
        .unwrap()
    };
    let cold = tune(&mut CostCache::new());
    let mut first = CostCache::new();
    let n = measure::tune_kernels(
        &c,
        &target,
        &mut first,
        &dir,
        quick_budget(),
        &mut |_| Ok(()),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(n, 3);
    // The first pass's times, made faster than any trial can be: the defaults stay, with them.
    let mut cache = CostCache::new();
    for (k, e) in first.entries_for_target(&target) {
        let fast = Entry::new(1e-3, 1e-3, e.samples, e.params.clone()).unwrap();
        cache.insert(k.clone(), fast).unwrap();
    }
    let warm = tune(&mut cache);
    assert_eq!((warm.kernels, cold.kernels), (3, 3), "{warm} / {cold}");
    assert_eq!(
        warm.exhaustive_trials + 3,
        cold.exhaustive_trials,
        "{warm} / {cold}"
    );
    assert!(warm.trials < cold.trials, "{warm} / {cold}");
    let mut counted = 0;
    for (k, e) in cache.entries_for_target(&target) {
        assert_eq!(e.median_us, 1e-3, "{:?}", e.params);
        assert_eq!(e.params["plan"], first.get(k).unwrap().params["plan"]);
        let tuned = &e.params["tuned"];
        let trials = tuned
            .split(", ")
            .nth(1)
            .and_then(|t| t.strip_suffix(" trials"));
        counted += trials.unwrap().parse::<usize>().unwrap();
    }
    if warm.bridges == 0 {
        assert_eq!(counted, warm.trials, "{warm}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two layers that run the same program (two 256x256 products with a ReLU) are searched once:
/// the second shares the first's plan and measurement, and its entry says so; the exhaustive
/// baseline measures both.
#[test]
fn identical_layers_share_one_search() {
    use collage_build::driver::{self, Options};
    use collage_build::tune::plans::{tune_plans, PlanTuning};
    let dir = std::env::temp_dir().join(format!("collage-twins-test-{}", std::process::id()));
    let source = "
        # weights w1: [256, 256], w2: [256, 256]
        model! {
            TwoLayers {
                input x: f32[64, 256];
                weights \"weights.safetensors\";
                output y = relu(relu(x @ w1) @ w2);
            }
        }";
    std::fs::create_dir_all(&dir).unwrap();
    let g = common::snippet_graph(&dir.join("two.plan"), source, &dir);
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let c = driver::compile(g, "two", &opts).unwrap();
    let tune = |reuse: bool| {
        let mut cache = CostCache::new();
        let settings = PlanTuning {
            top_k: 6,
            reuse,
            ..PlanTuning::default()
        };
        let r = tune_plans(
            &[&c.program],
            "two",
            &target,
            &mut cache,
            &dir.join("work"),
            quick_budget(),
            &settings,
            &mut |_| Ok(()),
            &mut |_, _, _| {},
        )
        .unwrap();
        (r, cache)
    };
    let (eto, cache) = tune(true);
    assert_eq!((eto.kernels, eto.shared), (2, 1), "{eto}");
    let tuned: Vec<String> = cache
        .entries_for_target(&target)
        .map(|(_, e)| e.params["tuned"].clone())
        .collect();
    assert_eq!(tuned.len(), 2, "{tuned:?}");
    assert!(
        tuned.iter().any(|t| t.starts_with("same program as k")),
        "{tuned:?}"
    );
    let plans: Vec<&String> = cache
        .entries_for_target(&target)
        .map(|(_, e)| &e.params["plan"])
        .collect();
    assert_eq!(plans[0], plans[1]);
    let (exhaustive, _) = tune(false);
    assert_eq!(
        (exhaustive.kernels, exhaustive.shared),
        (2, 0),
        "{exhaustive}"
    );
    assert_eq!(
        exhaustive.trials, exhaustive.exhaustive_trials,
        "{exhaustive}"
    );
    assert_eq!(eto.exhaustive_trials, exhaustive.exhaustive_trials, "{eto}");
    assert!(eto.trials < exhaustive.trials, "{eto} / {exhaustive}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three products of one family (each with a ReLU): 64x256 @ 256x256, then @ 256x512, then
/// @ 512x256; weights written to `dir`.
fn three_products(dir: &std::path::Path) -> collage_build::ir::Graph {
    let source = "
        # weights w1: [256, 256], w2: [256, 512], w3: [512, 256]
        model! {
            ThreeProducts {
                input x: f32[64, 256];
                weights \"weights.safetensors\";
                output y = relu(relu(relu(x @ w1) @ w2) @ w3);
            }
        }";
    std::fs::create_dir_all(dir).unwrap();
    common::snippet_graph(&dir.join("three.plan"), source, dir)
}

/// The test hook that tunes a narrower vector variant's plans on a wider machine: for every
/// variant this machine runs, the plans are tuned with that variant forced (`Isa::defines`),
/// recorded under a fingerprint of a machine with that variant, applied by a build for it, and
/// the model forced onto that variant computes what the untuned build computes.
#[test]
fn every_vector_variants_plans_are_tuned_and_checked_here() {
    use collage_build::driver::{self, Options};
    use collage_build::te::Isa;
    use collage_build::tune::plans::{host_isa, tune_plans, PlanTuning};
    let dir = std::env::temp_dir().join(format!("collage-isa-test-{}", std::process::id()));
    let g = three_products(&dir);
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let budget = quick_budget();
    let untuned = driver::compile(g.clone(), "three", &opts).unwrap();
    let mut h = measure::build_model(&untuned, &dir.join("untuned"), "-O2").unwrap();
    h.run(&collage_runtime::Executor::Serial);
    let want = h.output(0);
    let host = host_isa();
    let cc = collage_build::toolchain::c_compiler_version();
    for isa in Isa::ALL.into_iter().filter(|&i| i >= host) {
        let features: &[&str] = match isa {
            Isa::Avx512 => &["avx2", "avx512f", "fma"],
            Isa::Avx2 => &["avx2", "fma"],
            Isa::Base => &[],
        };
        let target = TargetFingerprint::new(
            std::env::consts::ARCH,
            features.iter().copied(),
            &cc,
            collage_build::tune::TUNER_VERSION,
        );
        let mut cache = CostCache::new();
        let settings = PlanTuning {
            top_k: 4,
            isa: Some(isa),
            ..PlanTuning::default()
        };
        let r = tune_plans(
            &[&untuned.program],
            "three",
            &target,
            &mut cache,
            &dir.join(isa.name()),
            budget,
            &settings,
            &mut |_| Ok(()),
            &mut |_, _, _| {},
        )
        .unwrap();
        assert_eq!(r.kernels, 3, "{isa}: {r}");
        // The recorded plans are the variant's: its vectors' lanes.
        let lanes = format!("x{} ", isa.lanes());
        for (_, e) in cache.entries_for_target(&target) {
            assert!(e.params["plan"].contains(&lanes), "{isa}: {:?}", e.params);
        }
        // A build for that machine applies them; forced onto the variant, it computes what the
        // untuned build does.
        let with = Options {
            cache: Some(std::sync::Arc::new(cache)),
            target: Some(target.clone()),
            ..opts.clone()
        };
        let c = driver::compile(g.clone(), "three", &with).unwrap();
        assert!(c.warnings.is_empty(), "{isa}: {:?}", c.warnings);
        let mut h =
            measure::build_model_with(&c, &dir.join(isa.name()), "-O2", isa.defines()).unwrap();
        h.run(&collage_runtime::Executor::Serial);
        let got = h.output(0);
        let (a, b) = (got.to_f32(), want.to_f32());
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-3 * (1.0 + y.abs()),
                "{isa}: element {i}: {x} vs {y}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A short timing: what the tests need is entries, not precise times.
fn quick_budget() -> MeasureBudget {
    MeasureBudget {
        warmup: 1,
        min_runs: 3,
        min_time: Duration::from_millis(1),
    }
}
