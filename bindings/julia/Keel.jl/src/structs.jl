# Out-parameter structs for the ABI: every struct the core fills starts with struct_size, which the
# caller sets so an older core writes only the fields it knows (docs/architecture.md §8, rule 3).

zero_value(::Type{T}) where {T<:Number} = zero(T)
zero_value(::Type{Ptr{T}}) where {T} = Ptr{T}(C_NULL)
zero_value(::Type{Cstring}) = reinterpret(Cstring, C_NULL)
zero_value(::Type{NTuple{N,T}}) where {N,T} = ntuple(_ -> zero_value(T), N)
zero_value(::Type{T}) where {T} = T((zero_value(fieldtype(T, i)) for i in 1:fieldcount(T))...)

"""A zeroed ABI struct of type `T` whose first field, struct_size, holds sizeof(T)."""
sized(::Type{T}) where {T} = T(Csize_t(sizeof(T)), (zero_value(fieldtype(T, i)) for i in 2:fieldcount(T))...)

"""A string the core handed out, copied; NULL reads as ""."""
copy_string(s::Cstring) = reinterpret(Ptr{UInt8}, s) == C_NULL ? "" : unsafe_string(s)
