// What `keel --help`, `keel help COMMAND` and `keel COMMAND --help` print: the overview of every
// command, and each command's own usage. The commands that live in the library (prepare-data,
// export, launch, schedule-check) and plot keep their text beside their parsers; this file only
// says which text belongs to which name, so a new command is listed in one place.
#pragma once

#include <string>

namespace keel_cli {

extern const char* const kOverviewUsage;  // every command, one or two lines each

// The usage of `command` ("run", "export", ...), or nullptr when no command has that name.
const char* command_usage(const std::string& command);

// Whether the words after the command ask for its usage: "--help" or "-h" among them.
bool asks_for_help(int argc, char** argv);

}  // namespace keel_cli
