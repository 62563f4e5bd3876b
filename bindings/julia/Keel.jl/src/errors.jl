# Keel's one error path in Julia: every core call returns a status, and a failed one becomes a
# KeelError carrying the message the core left for this thread (keel_last_error).

"""
    KeelError(code, message)

A Keel call failed. `code` is one of `Keel.LibKeel.KEEL_ERR_*`; `message` is what the core said,
e.g. `data.micro_batch: expected an integer, found string`.
"""
struct KeelError <: Exception
    code::Int32
    message::String
end

const STATUS_NAMES = Dict{Int32,String}(Int32(getfield(LibKeel, name)) => String(name)
                                        for name in names(LibKeel; all = true)
                                        if startswith(String(name), "KEEL_ERR_"))

function Base.showerror(io::IO, err::KeelError)
    print(io, "KeelError(", get(STATUS_NAMES, err.code, string(err.code)), "): ", err.message)
end

last_error() = unsafe_string(LibKeel.keel_last_error())

"""Throws a KeelError unless `status` is KEEL_OK."""
function check(status::Integer)
    status == LibKeel.KEEL_OK || throw(KeelError(Int32(status), last_error()))
    return nothing
end
