# Keel.jl: train GPT-style models with Keel from Julia. The raw layer, LibKeel, is generated from
# the C headers (bindings/julia/generator); the files included below turn it into Julia: a
# Trainer that frees its core object when collected, and KeelError in place of status codes.
module Keel

include("LibKeel.jl")
using .LibKeel

include("errors.jl")
include("structs.jl")
include("trainer.jl")
include("params.jl")
include("plugins.jl")

export KeelError, Trainer, StepMetrics, step!, train!, last_metrics, evaluate, save, load!,
       param_names, param_shape, read_param, write_param!, plugins, register_plugin_library

"""The ABI version these bindings were generated from."""
abi_version() = VersionNumber(LibKeel.KEEL_ABI_VERSION_MAJOR, LibKeel.KEEL_ABI_VERSION_MINOR)

# LibKeel.libkeel is fixed when the package is precompiled; say so when KEEL_LIB changed since,
# because every call would still go to the library named then.
function __init__()
    wanted = get(ENV, "KEEL_LIB", "libkeel-core")
    if wanted != LibKeel.libkeel
        @warn "Keel was precompiled with KEEL_LIB=$(LibKeel.libkeel) but KEEL_LIB is now $wanted; " *
              "calls go to the former. Start julia with --compiled-modules=no, or touch " *
              "$(@__FILE__) to recompile."
    end
end

end # module Keel
