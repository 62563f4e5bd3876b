/* The ABI version of these headers. A plugin records the version it was built against in
   its entry; the core refuses another major and never calls a slot newer than the plugin's
   minor. Until 1.0 is frozen, a breaking change bumps the minor and is said in CHANGES. */
#ifndef KEEL_VERSION_H
#define KEEL_VERSION_H

#define KEEL_ABI_VERSION_MAJOR 0
#define KEEL_ABI_VERSION_MINOR 1

#endif
