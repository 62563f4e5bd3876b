# What the plugin loader found, and how to add a library to it; process-wide, no Trainer needed.

"""Adds one plugin library by path ahead of every search folder."""
register_plugin_library(path::AbstractString) = check(LibKeel.keel_register_plugin_library(String(path)))

"""
    plugins()

Every plugin the loader found, as named tuples (kind, name, version, abi, path, description);
`path` is "" for plugins registered in-process.
"""
function plugins()
    count = Ref{Csize_t}(0)
    check(LibKeel.keel_plugin_count(count))
    return [describe_plugin(i) for i in 0:Int(count[])-1]
end

function describe_plugin(index::Integer)
    out = Ref(sized(LibKeel.keel_plugin_description))
    check(LibKeel.keel_plugin_describe(Csize_t(index), out))
    info = unsafe_load(out[].info)
    return (kind = copy_string(out[].kind_name), name = copy_string(info.name), version = copy_string(info.version),
            abi = VersionNumber(info.abi_major, info.abi_minor), path = copy_string(out[].path),
            description = copy_string(info.description))
end
