/* Library initialisation, done once on first use rather than at load time, so that merely
 * linking libkvik costs nothing and reads no environment. */
#ifndef KVIK_SRC_INIT_H
#define KVIK_SRC_INIT_H

/* Initialise on first call: register the fork() handlers and read the settings from the
 * environment. Returns 0, or KVIK_ECONFIG (every time) if the environment holds an invalid
 * value, with this thread's detail message saying which. */
int kvik__init(void);

#endif
