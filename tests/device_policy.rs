//! The `MATFREE_GPU` policy and the device it selects, in any build; and,
//! in a build without the `cuda` feature, that `auto` quietly gives the CPU
//! while any request for the GPU is an error naming the field, the value
//! and the rule (how to get a build with CUDA support).

use matfree::device::{check_cuda_support, select_device, GpuPolicy};
use matfree::Error;

#[test]
fn policy_off_uses_the_cpu_and_says_so() {
    let off = select_device(GpuPolicy::Off).unwrap();
    assert!(!off.is_gpu(), "MATFREE_GPU=off must select the CPU");
    let describe = off.describe();
    assert!(
        describe.starts_with("cpu") && describe.contains("MATFREE_GPU=off"),
        "{describe}"
    );
    assert_eq!(GpuPolicy::parse("AUTO").unwrap(), GpuPolicy::Auto);
    assert_eq!(GpuPolicy::parse("required").unwrap(), GpuPolicy::Required);
    match GpuPolicy::parse("maybe") {
        Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "MATFREE_GPU"),
        other => panic!("expected an error naming MATFREE_GPU, got {:?}", other.map(|_| ())),
    }
    // Auto never fails: without a GPU it is the CPU, with the reason.
    let auto = select_device(GpuPolicy::Auto).unwrap();
    println!("auto selects: {}", auto.describe());
}

/// The error a GPU request gets in a build without CUDA: the field and
/// value as given, and a rule that says to build with the `cuda` feature.
#[cfg(not(feature = "cuda"))]
fn assert_no_cuda_error(e: Error, want_field: &str, want_value: &str) {
    match e {
        Error::InvalidInput { field, value, rule } => {
            assert_eq!((field.as_str(), value.as_str()), (want_field, want_value));
            assert!(rule.contains("no CUDA support"), "{rule}");
            assert!(rule.contains("`cuda` feature"), "{rule}");
        }
        other => panic!("expected an invalid-input error, got {other}"),
    }
}

#[test]
#[cfg(not(feature = "cuda"))]
fn without_cuda_auto_is_the_cpu_and_a_gpu_request_is_an_error() {
    let auto = select_device(GpuPolicy::Auto).unwrap();
    assert!(!auto.is_gpu());
    assert!(
        auto.describe().contains("without the cuda feature"),
        "{}",
        auto.describe()
    );
    let e = select_device(GpuPolicy::Required)
        .err()
        .expect("required must fail without cuda");
    let message = e.to_string();
    assert!(
        message.starts_with("invalid input: MATFREE_GPU = required: "),
        "{message}"
    );
    assert_no_cuda_error(e, "MATFREE_GPU", "required");
    assert_no_cuda_error(check_cuda_support("--backend", "gpu").unwrap_err(), "--backend", "gpu");
}

#[test]
#[cfg(feature = "cuda")]
fn with_cuda_a_gpu_request_is_served_or_fails_on_the_device() {
    check_cuda_support("--backend", "gpu").unwrap();
    // Required either finds the GPU or names what is missing on this machine,
    // never the build.
    if let Err(e) = select_device(GpuPolicy::Required) {
        assert!(!e.to_string().contains("no CUDA support"), "{e}");
    }
}
