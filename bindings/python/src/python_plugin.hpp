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

  // `api` is the kind's table with every slot but `create` filled in. A name already taken is
  // refused with KeelError naming who has it, unless `replace`: then this plugin takes the
  // name for trainers created afterwards (one registered here from Python keeps its pool slot,
  // so re-running a notebook cell does not use the pool up). Throws KeelError when the pool is full.
  static const Plugin& add(int32_t kind, const std::string& kind_label, const std::string& name,
                           py::object factory, typename Kind::Api api, const std::string& version,
                           const std::string& description, bool replace) {
    size_t slot = count_;
    for (size_t i = 0; i < count_; ++i)
      if (plugins_[i]->name == name) slot = i;
    if (slot < count_ && !replace)
      throw KeelError(KEEL_ERR_ABI_MISMATCH, "cannot register " + kind_label + " '" + name +
                                                 "': this process registered one of that name from Python already; "
                                                 "pass replace=True to replace it");
    if (slot == kMaxPlugins)
      throw KeelError(KEEL_ERR_OUT_OF_MEMORY, "cannot register " + kind_label + " '" + name + "': at most " +
                                                  std::to_string(kMaxPlugins) + " per process");
    auto plugin = std::make_unique<Plugin>();
    plugin->name = name;
    plugin->version = version;
    plugin->description = description;
    plugin->source = kind_label + " " + name;
    plugin->factory = std::move(factory);
    plugin->api = api;
    plugin->api.create = create_slots()[slot];
    plugin->info = {sizeof(keel_plugin_info), kind, plugin->name.c_str(), plugin->version.c_str(),
                    KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &plugin->api, plugin->description.c_str()};
    // The one replaced stays allocated: trainers made from it still call its table.
    Plugin* previous = slot < count_ ? plugins_[slot] : nullptr;
    plugins_[slot] = plugin.get();  // before registering: the core may call create at once
    // With the GIL held throughout, so no other thread registers meanwhile (the pool has no lock).
    const keel_status status = replace ? keel_register_plugin_replace(&plugin->info) : keel_register_plugin(&plugin->info);
    if (status != KEEL_OK) {
      plugins_[slot] = previous;
      std::string message = keel_last_error();
      if (status == KEEL_ERR_ABI_MISMATCH && message.find("already provided") != std::string::npos)
        message = "cannot register " + kind_label + " '" + name + "': " + message + " (pass replace=True to use "
                  "this one instead)";
      throw KeelError(status, message);
    }
    if (slot == count_) ++count_;
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
