# The Trainer: one core trainer object (keel_trainer) owned by a Julia object that destroys it
# when closed or collected, and the calls that drive it: step!, train!, evaluate, save, load!.
# Every ccall keeps the Trainer alive (GC.@preserve) so its finalizer cannot run mid-call.

"""
    Trainer(source::AbstractString)

A trainer built from a JSON config: `source` is JSON text when it starts with `{`, else the path
of a config file. Throws a KeelError naming the config path that is wrong. Free it early with
`close(trainer)`; otherwise the garbage collector does. One thread at a time per trainer.
"""
mutable struct Trainer
    handle::Ptr{LibKeel.keel_trainer}
    function Trainer(handle::Ptr{LibKeel.keel_trainer})
        trainer = new(handle)
        finalizer(close, trainer)
        return trainer
    end
end

Trainer(source::AbstractString) = startswith(lstrip(source), "{") ? from_json(source) : from_file(source)

"""A Trainer from JSON text."""
function from_json(json_text::AbstractString)
    out = Ref(Ptr{LibKeel.keel_trainer}(C_NULL))
    check(LibKeel.keel_trainer_create_from_json(String(json_text), out))
    return Trainer(out[])
end

"""A Trainer from a JSON config file (relative paths inside it are the core's business)."""
function from_file(path::AbstractString)
    out = Ref(Ptr{LibKeel.keel_trainer}(C_NULL))
    check(LibKeel.keel_trainer_create_from_file(String(path), out))
    return Trainer(out[])
end

function Base.close(trainer::Trainer)
    if trainer.handle != C_NULL
        LibKeel.keel_trainer_destroy(trainer.handle)
        trainer.handle = Ptr{LibKeel.keel_trainer}(C_NULL)
    end
    return nothing
end

Base.show(io::IO, trainer::Trainer) = print(io, "Keel.Trainer(", trainer.handle == C_NULL ? "closed" : "open", ")")

function handle(trainer::Trainer)
    trainer.handle == C_NULL && throw(ArgumentError("this Keel.Trainer was closed"))
    return trainer.handle
end

"""What one optimizer step reported (keel_step_metrics without its struct_size)."""
struct StepMetrics
    step::Int64          # optimizer steps done, after this one
    loss::Float32        # mean training loss over the step's micro-batches
    lr::Float32
    grad_norm::Float32   # before clipping
    tokens_per_s::Float64
    mfu::Float64         # fraction of the backend's peak
    step_ms::Float64
end

StepMetrics(m::LibKeel.keel_step_metrics) =
    StepMetrics(m.step, m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.mfu, m.step_ms)

"""One optimizer step (every micro-batch of the accumulation); returns its StepMetrics."""
function step!(trainer::Trainer)
    metrics = Ref(sized(LibKeel.keel_step_metrics))
    GC.@preserve trainer check(LibKeel.keel_trainer_step(handle(trainer), metrics))
    return StepMetrics(metrics[])
end

"""The metrics of the last step (zeros before the first)."""
function last_metrics(trainer::Trainer)
    metrics = Ref(sized(LibKeel.keel_step_metrics))
    GC.@preserve trainer check(LibKeel.keel_trainer_last_metrics(handle(trainer), metrics))
    return StepMetrics(metrics[])
end

# The callback crosses C as a plain function plus a pointer to this state; an exception thrown
# by the Julia callback is kept here, stops training, and is rethrown once the core returns.
mutable struct CallbackState
    callback::Any
    error::Any
end

function step_callback(metrics::Ptr{LibKeel.keel_step_metrics}, user_data::Ptr{Cvoid})::Int32
    state = unsafe_pointer_to_objref(user_data)::CallbackState
    try
        return state.callback(StepMetrics(unsafe_load(metrics))) === false ? Int32(1) : Int32(0)
    catch err
        state.error = err
        return Int32(1)
    end
end

"""
    train!(trainer, steps)
    train!(trainer, steps) do metrics ... end

Runs `steps` optimizer steps and returns the last StepMetrics. The optional callback sees each
step's StepMetrics; returning `false` stops training after that step.
"""
train!(trainer::Trainer, steps::Integer) = train!(nothing, trainer, steps)

function train!(callback, trainer::Trainer, steps::Integer)
    if callback === nothing
        GC.@preserve trainer check(LibKeel.keel_trainer_train(handle(trainer), Int64(steps), C_NULL, C_NULL))
        return last_metrics(trainer)
    end
    state = CallbackState(callback, nothing)
    trampoline = @cfunction(step_callback, Int32, (Ptr{LibKeel.keel_step_metrics}, Ptr{Cvoid}))
    status = GC.@preserve trainer state LibKeel.keel_trainer_train(handle(trainer), Int64(steps), trampoline,
                                                                  pointer_from_objref(state))
    state.error === nothing || throw(state.error)
    check(status)
    return last_metrics(trainer)
end

"""Mean validation loss over the configured number of validation batches."""
function evaluate(trainer::Trainer)
    loss = Ref{Cfloat}(0)
    GC.@preserve trainer check(LibKeel.keel_trainer_evaluate(handle(trainer), loss))
    return loss[]
end

"""Saves a checkpoint under `root_dir` (root_dir/step-N, then root_dir/latest), keeping the newest `keep`."""
function save(trainer::Trainer, root_dir::AbstractString; keep::Integer = 3)
    GC.@preserve trainer check(LibKeel.keel_trainer_save(handle(trainer), String(root_dir), Int32(keep)))
    return nothing
end

"""Loads a checkpoint: a step folder, or a root whose `latest` names one."""
function load!(trainer::Trainer, checkpoint_path::AbstractString)
    GC.@preserve trainer check(LibKeel.keel_trainer_load(handle(trainer), String(checkpoint_path)))
    return trainer
end
