//! Builds the C++ shim against libtorch, the way torch-sys finds it:
//! 1. `LIBTORCH=/path/to/libtorch` (a libtorch distribution: `include/`, `lib/`), ABI from
//!    `LIBTORCH_CXX11_ABI` (default 1);
//! 2. otherwise the torch of a Python interpreter: `TORCHSCAN_PYTHON`, else `python3`.
//!
//! The shim is compiled with the standard, `_GLIBCXX_USE_CXX11_ABI` and `NDEBUG` that torch was
//! built with, and linked whole (`+whole-archive`): nothing in Rust references the
//! `TORCH_LIBRARY` registrations, so a plain static link would silently drop them.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The torch releases `make test-torch` proves (docs/installing.md): older ones are refused, newer
/// ones built with a warning. setup.py and the README state the same range.
const OLDEST_MINOR: u32 = 8;
const NEWEST_MINOR: u32 = 13;
const SUPPORTED: &str = "torch >= 2.8 and < 2.14";

struct Torch {
    version: String,
    major: u32,
    minor: u32,
    includes: Vec<PathBuf>,
    lib_dir: PathBuf,
    cxx11_abi: bool,
    origin: String,
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/ffi.rs");
    println!("cargo:rerun-if-changed=cpp");
    for var in ["LIBTORCH", "LIBTORCH_CXX11_ABI", "TORCHSCAN_PYTHON", "TORCHSCAN_PACKAGE_RPATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if env::var_os("CARGO_FEATURE_TORCH").is_none() {
        println!("cargo:rustc-env=TORCHSCAN_TORCH_VERSION=none");
        return;
    }
    let torch = match locate() {
        Ok(t) => t,
        Err(message) => fail(&message),
    };
    if torch.major != 2 || torch.minor < OLDEST_MINOR {
        fail(&format!("found torch {} ({}), but torchscan supports {SUPPORTED}", torch.version, torch.origin));
    }
    if torch.minor > NEWEST_MINOR {
        println!(
            "cargo:warning=torchscan: torch {} is newer than the releases it is tested with ({SUPPORTED}); \
             run `make test-torch TORCH={}` before relying on it",
            torch.version, torch.version
        );
    }
    println!("cargo:warning=torchscan: building against torch {} ({})", torch.version, torch.origin);

    let standard = if torch.minor >= 10 { "-std=c++20" } else { "-std=c++17" };
    let mut build = cxx_build::bridge("src/ffi.rs");
    build
        .files(["cpp/observer.cpp", "cpp/ops.cpp", "cpp/memory.cpp", "cpp/api.cpp", "cpp/collectives.cpp"])
        .include("cpp/include")
        .include("cpp")
        .includes(&torch.includes)
        .flag(standard)
        .flag("-fPIC")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-missing-field-initializers")
        .define("NDEBUG", None)
        .define("_GLIBCXX_USE_CXX11_ABI", if torch.cxx11_abi { "1" } else { "0" })
        .define("TORCHSCAN_TORCH_VERSION", format!("\"{}\"", torch.version).as_str())
        .link_lib_modifier("+whole-archive")
        .opt_level(2)
        .debug(false);
    build.compile("torchscan_shim");

    println!("cargo:rustc-link-search=native={}", torch.lib_dir.display());
    for lib in ["torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:rustc-env=TORCHSCAN_TORCH_VERSION={}", torch.version);
    println!("cargo:rustc-env=TORCHSCAN_TORCH_LIB_DIR={}", torch.lib_dir.display());
    // Rust tests and examples run against this libtorch without LD_LIBRARY_PATH. The Python
    // package's copy (setup.py sets TORCHSCAN_PACKAGE_RPATH=1) finds torch's libraries beside it
    // in site-packages, wherever that is installed, and names no path of the build machine.
    if env::var_os("TORCHSCAN_PACKAGE_RPATH").is_some_and(|v| v == "1") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../../torch/lib");
    } else {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", torch.lib_dir.display());
    }
    // For C++ applications and tests that link the staticlib: where libtorch is.
    println!("cargo:lib_dir={}", torch.lib_dir.display());
}

fn fail(message: &str) -> ! {
    eprintln!("\nerror: torchscan cannot find a usable libtorch: {message}\n");
    eprintln!("  Install PyTorch into the Python that builds torchscan (pip install torch==2.13.0),");
    eprintln!("  or point TORCHSCAN_PYTHON=/path/to/python at an interpreter that has it,");
    eprintln!("  or set LIBTORCH=/path/to/libtorch (a libtorch distribution; LIBTORCH_CXX11_ABI=0|1).");
    eprintln!("  Supported: {SUPPORTED}.\n");
    std::process::exit(1);
}

fn locate() -> Result<Torch, String> {
    if let Some(root) = env::var_os("LIBTORCH") {
        return from_libtorch(Path::new(&root));
    }
    from_python()
}

fn from_libtorch(root: &Path) -> Result<Torch, String> {
    let include = root.join("include");
    let lib_dir = root.join("lib");
    if !include.is_dir() || !lib_dir.is_dir() {
        return Err(format!("LIBTORCH={} has no include/ and lib/ folders", root.display()));
    }
    let (major, minor, patch) = header_version(&include)
        .ok_or_else(|| format!("LIBTORCH={}: no torch version header found", root.display()))?;
    let cxx11_abi = env::var("LIBTORCH_CXX11_ABI").map(|v| v != "0").unwrap_or(true);
    Ok(Torch {
        version: format!("{major}.{minor}.{patch}"),
        major,
        minor,
        includes: vec![include.clone(), include.join("torch/csrc/api/include")],
        lib_dir,
        cxx11_abi,
        origin: format!("LIBTORCH={}", root.display()),
    })
}

/// `TORCH_VERSION_{MAJOR,MINOR,PATCH}` from the headers (their location moved in 2.8).
fn header_version(include: &Path) -> Option<(u32, u32, u32)> {
    for rel in ["torch/headeronly/version.h", "torch/csrc/api/include/torch/version.h"] {
        let Ok(text) = std::fs::read_to_string(include.join(rel)) else { continue };
        let grab = |name: &str| -> Option<u32> {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(&format!("#define {name} ")).map(str::trim))
                .and_then(|v| v.parse().ok())
        };
        if let (Some(a), Some(b), Some(c)) =
            (grab("TORCH_VERSION_MAJOR"), grab("TORCH_VERSION_MINOR"), grab("TORCH_VERSION_PATCH"))
        {
            return Some((a, b, c));
        }
    }
    None
}

const PROBE: &str = r#"
import os, torch
from torch.utils.cpp_extension import include_paths
print(torch.__version__.split('+')[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(os.path.join(os.path.dirname(torch.__file__), 'lib'))
for p in include_paths():
    print(p)
"#;

fn from_python() -> Result<Torch, String> {
    let python = env::var("TORCHSCAN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .args(["-c", PROBE])
        .output()
        .map_err(|e| format!("could not run {python} ({e}); set TORCHSCAN_PYTHON or LIBTORCH"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("").to_string();
        return Err(format!("{python} cannot import torch ({last})"));
    }
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let mut lines = text.lines();
    let version = lines.next().ok_or("the torch probe printed nothing")?.trim().to_string();
    let abi = lines.next().ok_or("the torch probe printed no ABI flag")?.trim() == "1";
    let lib_dir = PathBuf::from(lines.next().ok_or("the torch probe printed no lib dir")?.trim());
    let includes: Vec<PathBuf> = lines.map(|l| PathBuf::from(l.trim())).collect();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    Ok(Torch { version, major, minor, includes, lib_dir, cxx11_abi: abi, origin: format!("the torch of {python}") })
}
