# Parameters by name: their global shapes and host copies of their values. Values cross as flat
# Vector{Float32} in the core's row-major order (reshape with reversed dims for a Julia view).

"""The number of parameters the model declares."""
function param_count(trainer::Trainer)
    count = Ref{Csize_t}(0)
    GC.@preserve trainer check(LibKeel.keel_trainer_param_count(handle(trainer), count))
    return Int(count[])
end

"""(name, shape) of parameter `index` (0-based, the model's order)."""
function param_info(trainer::Trainer, index::Integer)
    info = Ref(sized(LibKeel.keel_param_info))
    GC.@preserve trainer check(LibKeel.keel_trainer_param_info(handle(trainer), Csize_t(index), info))
    return (name = unsafe_string(info[].name), shape = info[].shape[1:info[].ndim])
end

"""The parameters' names, in the model's order."""
param_names(trainer::Trainer) = [param_info(trainer, i).name for i in 0:param_count(trainer)-1]

"""The global shape of parameter `name`, row-major, as a tuple."""
function param_shape(trainer::Trainer, name::AbstractString)
    for i in 0:param_count(trainer)-1
        info = param_info(trainer, i)
        info.name == name && return info.shape
    end
    throw(KeelError(LibKeel.KEEL_ERR_NOT_FOUND, "no parameter named \"$name\""))
end

"""A copy of parameter `name`, flat, in row-major order."""
function read_param(trainer::Trainer, name::AbstractString)
    values = Vector{Float32}(undef, foldl(*, param_shape(trainer, name); init = 1))
    GC.@preserve trainer check(LibKeel.keel_trainer_read_param(handle(trainer), String(name), values, length(values)))
    return values
end

"""Overwrites parameter `name` with `values` (flat, row-major, its element count)."""
function write_param!(trainer::Trainer, name::AbstractString, values::AbstractVector{<:Real})
    src = Vector{Float32}(values)
    GC.@preserve trainer check(LibKeel.keel_trainer_write_param(handle(trainer), String(name), src, length(src)))
    return trainer
end
