/* The `kvik` executable; the command itself is cli_main() in kvik.c. */
#include "cli.h"

int main(int argc, char **argv) { return cli_main(argc, argv); }
