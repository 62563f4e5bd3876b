# Trains a model from a Keel JSON config through the Julia binding, printing progress from a
# train! callback, then evaluates and saves a checkpoint: the Julia counterpart of `keel run`.
#   KEEL_LIB=build/lib/libkeel-core.so julia --project=bindings/julia/Keel.jl \
#       examples/julia/train.jl [config.json] [steps]
using Keel

config = length(ARGS) >= 1 ? ARGS[1] : joinpath(@__DIR__, "..", "quickstart.json")
steps = length(ARGS) >= 2 ? parse(Int, ARGS[2]) : 50

trainer = Trainer(config)
final_metrics = train!(trainer, steps) do m
    if m.step % 10 == 0
        println("step $(m.step)  loss $(round(m.loss; digits = 4))  lr $(m.lr)  ",
                "$(round(m.tokens_per_s; digits = 0)) tok/s")
    end
    return true   # false would stop after this step
end
println("trained $(final_metrics.step) steps; validation loss $(evaluate(trainer))")
save(trainer, "runs/julia-example/checkpoints"; keep = 1)
println("saved to runs/julia-example/checkpoints")
close(trainer)
