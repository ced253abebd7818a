/* Device buffers and streams registered with cuFile (kvik_cufile_buffer_register, kvik_cufile_stream_register). */
#ifndef KVIK_SRC_REGISTRY_H
#define KVIK_SRC_REGISTRY_H

void kvik__registry_atfork_prepare(void);
void kvik__registry_atfork_parent(void);
void kvik__registry_atfork_child(void);

#endif
