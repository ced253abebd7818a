/* The direction of a transfer, which every layer that moves bytes speaks of. */
#ifndef KVIK_SRC_OP_H
#define KVIK_SRC_OP_H

typedef enum kvik__op { KVIK__READ, KVIK__WRITE } kvik__op;

#endif
