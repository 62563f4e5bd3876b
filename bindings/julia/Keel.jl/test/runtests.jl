# Trains the quick start a few steps through Keel.jl (run by ctest as julia.package_tests with
# KEEL_LIB set to the build's libkeel-core.so): the loss falls, parameters read and write back,
# checkpoints round-trip, callbacks stop training, and a bad config raises a KeelError naming
# the JSON path.
using Keel
using Test

json_string(s) = "\"" * escape_string(s) * "\""

function quickstart_json(dir; micro_batch = "4")
    """
    {
      "model":       {"plugin": "gpt", "n_layer": 4, "n_head": 4, "d_model": 128, "vocab_size": 256, "seq_len": 128},
      "optimizer":   {"plugin": "adamw", "lr": 2e-3, "betas": [0.9, 0.95], "weight_decay": 0.1},
      "lr_schedule": {"warmup_steps": 2, "decay": "cosine", "min_lr_ratio": 0.1},
      "parallel":    {"strategy": {"plugin": "ddp"}},
      "backend":     {"plugin": "cpu"},
      "data":        {"source": "text", "micro_batch": $micro_batch, "global_batch": 4, "seq_len": 64, "val_batches": 2},
      "train":       {"steps": 20, "seed": 1337, "grad_clip": 1.0, "log_every": 1, "eval_every": 0,
                      "metrics_path": $(json_string(joinpath(dir, "metrics.jsonl"))), "tensorboard_dir": "none",
                      "checkpoint": {"dir": $(json_string(joinpath(dir, "checkpoints")))}, "sample_tokens": 0}
    }
    """
end

@testset "Keel.jl" begin
    dir = mktempdir()

    @testset "abi and plugins" begin
        @test Keel.abi_version() == v"0.3"
        found = plugins()
        @test any(p -> p.kind == "model" && p.name == "gpt", found)
        @test all(p -> p.abi.major == 0, found)
    end

    trainer = Trainer(quickstart_json(dir))

    @testset "step! lowers the loss" begin
        losses = [step!(trainer).loss for _ in 1:5]
        @test all(isfinite, losses)
        @test losses[end] < losses[1]
        @test last_metrics(trainer).step == 5
        @test isfinite(evaluate(trainer))
    end

    @testset "train! with and without a callback" begin
        @test train!(trainer, 1).step == 6
        seen = Int64[]
        metrics = train!(trainer, 5) do m
            push!(seen, m.step)
            length(seen) < 2          # false after the second step: stop
        end
        @test seen == [7, 8]
        @test metrics.step == 8
        raising(m) = error("raised in the callback")
        @test_throws ErrorException train!(raising, trainer, 3)
        @test last_metrics(trainer).step == 9   # the step whose callback raised still ran
    end

    @testset "parameters" begin
        names = param_names(trainer)
        @test !isempty(names)
        name = first(names)
        values = read_param(trainer, name)
        @test length(values) == prod(param_shape(trainer, name))
        write_param!(trainer, name, zeros(Float32, length(values)))
        @test all(iszero, read_param(trainer, name))
        write_param!(trainer, name, values)
        @test read_param(trainer, name) == values
        @test_throws KeelError read_param(trainer, "no.such.parameter")
    end

    @testset "checkpoints" begin
        root = joinpath(dir, "saved")
        save(trainer, root; keep = 1)
        name = first(param_names(trainer))
        before = read_param(trainer, name)
        step!(trainer)
        load!(trainer, root)
        @test read_param(trainer, name) == before
    end

    @testset "config file and errors" begin
        path = joinpath(dir, "config.json")
        write(path, quickstart_json(dir))
        from_file = Trainer(path)
        @test step!(from_file).step == 1
        close(from_file)
        @test_throws ArgumentError step!(from_file)

        err = try
            Trainer(quickstart_json(dir; micro_batch = "\"four\""))
        catch e
            e
        end
        @test err isa KeelError
        @test err.code == Keel.LibKeel.KEEL_ERR_INVALID_CONFIG
        @test occursin("data.micro_batch", err.message)
        @test occursin("data.micro_batch", sprint(showerror, err))
    end

    close(trainer)
end
