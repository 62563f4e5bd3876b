// Registering a plugin implemented in Python (keel_register_plugin, abi/keel/embed.h). The kind
// tables carry no user pointer, so a `create` slot cannot tell which Python factory it serves:
// each registration takes its own `create` from a fixed pool of template instances, numbered in
// registration order. Registrations live for the rest of the process, as the ABI requires of
// the info, its strings and its table; they are never freed (nor is their factory released).
#pragma once

#include <keel/plugin.h>
#include <pybind11/pybind11.h>

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "keel_python.hpp"

namespace keel_python {

template <typename Api>
struct PythonPlugin {
  std::string name, version, description;
  std::string source;  // "data source NAME": the prefix of every message it reports
  py::object factory;
  Api api{};
  keel_plugin_info info{};
};

using CreateSlot = keel_status (*)(const keel_host*, const char*, const char*, void**);

// Kind::Api is the kind's table type; Kind::create(plugin, host, config_json, json_path, out)
// makes one instance for `plugin`.
template <typename Kind>
class PythonPluginSlots {
 public:
  using Plugin = PythonPlugin<typename Kind::Api>;
  static constexpr size_t kMaxPlugins = 32;

  // `api` is the kind's table with every slot but `create` filled in. Throws KeelError when the
  // core refuses the plugin (a duplicate name) or the pool is full.
  static const Plugin& add(int32_t kind, const std::string& kind_label, const std::string& name,
                           py::object factory, typename Kind::Api api, const std::string& version,
                           const std::string& description) {
    if (count_ == kMaxPlugins)
      throw KeelError(KEEL_ERR_OUT_OF_MEMORY, "cannot register " + kind_label + " '" + name + "': at most " +
                                                  std::to_string(kMaxPlugins) + " per process");
    auto plugin = std::make_unique<Plugin>();
    plugin->name = name;
    plugin->version = version;
    plugin->description = description;
    plugin->source = kind_label + " " + name;
    plugin->factory = std::move(factory);
    plugin->api = api;
    plugin->api.create = create_slots()[count_];
    plugin->info = {sizeof(keel_plugin_info), kind, plugin->name.c_str(), plugin->version.c_str(),
                    KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &plugin->api, plugin->description.c_str()};
    plugins_[count_] = plugin.get();  // before registering: the core may call create at once
    check(keel_register_plugin(&plugin->info));
    ++count_;
    return *plugin.release();
  }

 private:
  template <size_t Slot>
  static keel_status create_in_slot(const keel_host* host, const char* config_json, const char* json_path,
                                    void** out) {
    return Kind::create(*plugins_[Slot], host, config_json, json_path, out);
  }
  template <size_t... Slots>
  static constexpr std::array<CreateSlot, kMaxPlugins> make_create_slots(std::index_sequence<Slots...>) {
    return {&create_in_slot<Slots>...};
  }
  static const std::array<CreateSlot, kMaxPlugins>& create_slots() {
    static constexpr auto slots = make_create_slots(std::make_index_sequence<kMaxPlugins>());
    return slots;
  }

  static inline Plugin* plugins_[kMaxPlugins] = {};
  static inline size_t count_ = 0;  // registration runs with the GIL held: no lock needed
};

}  // namespace keel_python
