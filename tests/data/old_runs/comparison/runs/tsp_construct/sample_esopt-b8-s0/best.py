# best of sample+esopt on tsp_construct (seed 0): objective 7.0043697989867315 on train50, candidate 1
# idea: idea 1389631366
import numpy as np

def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    return unvisited_nodes[np.argmin(distance_matrix[current_node][unvisited_nodes])]
