// What `keel --help`, `keel help COMMAND` and `keel COMMAND --help` print: the overview of every
// command, and each command's own usage. Each command keeps its text beside its parser (export,
// schedule-check, prepare-data and launch in their *_command.cpp, plot in plot/); this file only
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
